"""A synthetic engine for tests and harness checks: deterministic tones at a set speed, no speech model.

It stands in where a real part cannot exist (no GPU in CI): audio length follows the benchmark length rule
(0.37 s per word), every request's samples are a pure function of its text, and a shared "device" serializes
chunk production so that total throughput is capped at `device_rtf` audio-seconds per second, like a GPU.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator

import numpy as np

from .base import SAMPLE_RATE, AudioStream, Engine, EngineError, SynthesisRequest, VoiceInfo

SECONDS_PER_WORD = 0.37  # the synthetic-weight length rule of shared/workloads/README.md


def fake_audio(text: str, voice: str, num_samples: int, offset: int = 0) -> np.ndarray:
    """Samples [offset, offset + num_samples) of the request's signal: a voice- and text-seeded tone, int16."""
    digest = hashlib.sha256(f"{voice}\0{text}".encode()).digest()
    freq = 180.0 + digest[0] * 1.5  # 180..562 Hz
    t = (np.arange(offset, offset + num_samples, dtype=np.float64)) / SAMPLE_RATE
    envelope = 0.5 + 0.3 * np.sin(2 * np.pi * 3.0 * t)  # a syllable-rate wobble so silence detection is testable
    return np.round(8000.0 * envelope * np.sin(2 * np.pi * freq * t)).astype(np.int16)


def fake_duration_samples(text: str) -> int:
    words = max(1, len(text.split()))
    return round(words * SECONDS_PER_WORD * SAMPLE_RATE)


class FakeStream(AudioStream):
    def __init__(self, engine: FakeEngine, request: SynthesisRequest, voice: str) -> None:
        self.request = request
        self._engine = engine
        self._voice = voice
        self._cancelled = False

    def cancel(self) -> None:
        self._cancelled = True

    async def __aiter__(self) -> AsyncIterator[np.ndarray]:
        engine = self._engine
        total = fake_duration_samples(self.request.text)
        if self.request.max_audio_ms is not None:
            total = min(total, self.request.max_audio_ms * SAMPLE_RATE // 1000)
        chunk = engine.chunk_ms * SAMPLE_RATE // 1000
        engine._waiting += 1
        try:
            await asyncio.sleep(engine.first_chunk_ms / 1000)
        finally:
            engine._waiting -= 1
        produced = 0
        while produced < total and not self._cancelled:
            n = min(chunk, total - produced)
            async with engine._device:  # one chunk at a time across all streams: throughput is shared
                await asyncio.sleep(n / SAMPLE_RATE / engine.device_rtf)
            if self._cancelled:
                break
            yield fake_audio(self.request.text, self._voice, n, produced)
            produced += n


class FakeEngine(Engine):
    """Options: `device_rtf` (total audio-s per wall-s), `chunk_ms`, `first_chunk_ms`."""

    name = "fake"
    supports_instruct = False

    def __init__(self, device_rtf: float = 50.0, chunk_ms: int = 320, first_chunk_ms: float = 5.0) -> None:
        if device_rtf <= 0 or chunk_ms <= 0 or first_chunk_ms < 0:
            raise ValueError("device_rtf and chunk_ms must be positive, first_chunk_ms non-negative")
        self.device_rtf = float(device_rtf)
        self.chunk_ms = int(chunk_ms)
        self.first_chunk_ms = float(first_chunk_ms)
        self._device = asyncio.Lock()
        self._ready = False
        self._waiting = 0

    async def start(self) -> None:
        self._ready = True

    async def stop(self) -> None:
        self._ready = False

    @property
    def ready(self) -> bool:
        return self._ready

    @property
    def queue_depth(self) -> int:
        return self._waiting

    def voices(self) -> list[VoiceInfo]:
        return [VoiceInfo("tone-a", "Tone A", ("en",)), VoiceInfo("tone-b", "Tone B", ("en",))]

    def open_stream(self, request: SynthesisRequest) -> FakeStream:
        voice = request.voice or "tone-a"
        if voice not in {v.id for v in self.voices()}:
            raise EngineError("voice_not_found", f"voice {voice!r} not found; see GET /v1/voices")
        return FakeStream(self, request, voice)

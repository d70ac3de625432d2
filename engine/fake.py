"""A synthetic engine for tests and harness checks: deterministic tones at a set speed, no speech model.

It stands in where a real part cannot exist (no GPU in CI): audio length follows the benchmark length rule
(0.37 s per word), every request's samples are a pure function of its text, and a "device" paces chunk
production: shared by all streams (total throughput capped at `device_rtf` audio-seconds per second, like a GPU),
or one per stream (each stream at `device_rtf` x real time: a gateway-only benchmark, where the gateway is the limit).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import itertools
import math
import time
from collections.abc import AsyncIterator

import numpy as np

from .admission import DEFAULT_END_INTERVAL_S, Forecast
from .base import SAMPLE_RATE, AudioStream, Engine, EngineError, SynthesisRequest, VoiceInfo
from .words import WordTime

DEFAULT_VOICE = "tone-a"  # a request without a voice (the session named none)

SECONDS_PER_WORD = 0.37  # the synthetic-weight length rule of shared/workloads/README.md
WORD_SAMPLES = round(SECONDS_PER_WORD * SAMPLE_RATE)  # word i of a request is its samples [i, i + 1) * this
# Every tone (180 + 1.5 k Hz) and the 3 Hz envelope repeat after 2 s, so one period per tone is computed once and
# a chunk is a slice of it: the engine costs the gateway next to nothing even at thousands of audio-s/s.
PERIOD_SAMPLES = 2 * SAMPLE_RATE


_T = np.arange(PERIOD_SAMPLES, dtype=np.float64) / SAMPLE_RATE
_ENVELOPE = 8000.0 * (0.5 + 0.3 * np.sin(2 * np.pi * 3.0 * _T))  # a syllable-rate wobble: silence detection works


@functools.lru_cache(maxsize=256)
def _tone_period(k: int) -> np.ndarray:
    freq = 180.0 + k * 1.5  # 180..562 Hz
    period = np.round(_ENVELOPE * np.sin((2 * np.pi * freq) * _T)).astype(np.int16)
    period.flags.writeable = False
    return period


def _tone_index(text: str, voice: str) -> int:
    return hashlib.sha256(f"{voice}\0{text}".encode()).digest()[0]


def _slice(period: np.ndarray, num_samples: int, offset: int) -> np.ndarray:
    start = offset % PERIOD_SAMPLES
    if start + num_samples <= PERIOD_SAMPLES:
        return period[start : start + num_samples].copy()
    whole, rest = divmod(start + num_samples - PERIOD_SAMPLES, PERIOD_SAMPLES)
    return np.concatenate([period[start:], *([period] * whole), period[:rest]])


def fake_audio(text: str, voice: str, num_samples: int, offset: int = 0) -> np.ndarray:
    """Samples [offset, offset + num_samples) of the request's signal: a voice- and text-seeded tone, int16."""
    return _slice(_tone_period(_tone_index(text, voice)), num_samples, offset)


def fake_audio_ref(text: str, voice: str, num_samples: int, offset: int = 0) -> np.ndarray:
    """The signal computed directly (the reference `fake_audio`'s period table is checked against)."""
    freq = 180.0 + _tone_index(text, voice) * 1.5
    out = np.empty(num_samples, np.int16)
    for i in range(num_samples):  # one sample at a time, as the formula reads
        t = ((offset + i) % PERIOD_SAMPLES) / SAMPLE_RATE
        envelope = 8000.0 * (0.5 + 0.3 * math.sin(2 * math.pi * 3.0 * t))
        out[i] = round(envelope * math.sin(2 * math.pi * freq * t))
    return out


def fake_duration_samples(text: str) -> int:
    words = max(1, len(text.split()))
    return round(words * SECONDS_PER_WORD * SAMPLE_RATE)


def _flag(value: bool | str) -> bool:
    """A boolean option, also as the string an --engine-option gives ("false", "0")."""
    if isinstance(value, str):
        return value.strip().lower() not in ("false", "0", "no", "off")
    return bool(value)


def _now() -> float:
    """The event loop's clock (the device's), or the monotonic clock it reads outside one."""
    try:
        return asyncio.get_running_loop().time()
    except RuntimeError:
        return time.monotonic()


class _Device:
    """A virtual device clock: each chunk reserves its compute time after the work already reserved, and the
    stream sleeps until its reservation ends (no lock hand-offs through the event loop). A wait under a
    millisecond (finer than the loop's timers) only yields; the debt is slept off once it adds up."""

    def __init__(self, rtf: float) -> None:
        self.rtf = rtf
        self.free_at = 0.0

    async def run(self, samples: int) -> None:
        now = asyncio.get_running_loop().time()
        self.free_at = max(now, self.free_at) + samples / SAMPLE_RATE / self.rtf
        wait = self.free_at - now
        await asyncio.sleep(wait if wait >= 0.001 else 0)


class FakeStream(AudioStream):
    def __init__(self, engine: FakeEngine, request: SynthesisRequest, voice: str) -> None:
        self.request = request
        self._engine = engine
        self._voice = voice
        self._cancelled = False
        self._text = request.text  # all the text so far (text_open: grows by append_text)
        self._text_open = request.text_open
        self._more = asyncio.Event()  # text came, the text ended, or a cancel: a waiting stream looks again
        self._open = True  # counted in the engine's streams until it ends or is cancelled
        engine._streams += 1
        self._yielded = 0  # samples of the stream's chunks so far
        self._words_taken = 0
        self._stamps: dict[str, float] = {}  # the first-audio stages this engine has: queue (first_chunk_ms), codec

    def _closed(self) -> None:
        if self._open:
            self._open = False
            self._engine._stream_ended()

    def cancel(self) -> None:
        self._cancelled = True
        self._more.set()
        self._closed()

    def append_text(self, text: str) -> None:
        if not self._text_open:
            raise EngineError("text_closed", "this request's text has ended")
        self._text += text
        self._more.set()

    def end_text(self) -> None:
        if self.request.text_open:  # idempotent; a whole-text request has nothing to end
            self._text_open = False
            self._more.set()

    async def __aiter__(self) -> AsyncIterator[np.ndarray]:
        try:
            async for chunk in self._open_text() if self.request.text_open else self._whole_text():
                self._yielded += len(chunk)
                yield chunk
        finally:
            self._closed()

    def take_words(self) -> list[WordTime]:
        """Exact synthetic times: word i (split at whitespace) is the tone's samples [i, i + 1) * WORD_SAMPLES."""
        if not self.request.word_times:
            return []
        words = self._text.split()
        taken = []
        while self._words_taken < len(words) and self._words_taken * WORD_SAMPLES < self._yielded:
            i = self._words_taken
            taken.append(WordTime(words[i], i * WORD_SAMPLES, (i + 1) * WORD_SAMPLES))
            self._words_taken += 1
        return taken

    def first_audio_stamps(self) -> dict[str, float]:
        return dict(self._stamps)

    def _made(self) -> None:
        """A chunk came off the device: the first one ends the timeline's `codec` stage."""
        if "codec" not in self._stamps:
            self._stamps["codec"] = time.monotonic()

    def _spoken_samples(self) -> int:
        """Audio owed for the text so far: every complete word (the last one only once a space follows it or the
        text ended); at the end the whole-text rule, so the total equals a whole-text request's."""
        if not self._text_open:
            return fake_duration_samples(self._text)
        words = len(self._text.split())
        if words and not self._text[-1].isspace():
            words -= 1  # it may go on in the next piece
        return round(words * SECONDS_PER_WORD * SAMPLE_RATE)

    async def _first_chunk_wait(self) -> tuple[list[int], np.ndarray, _Device]:
        """What both kinds of request start with: the chunk schedule in samples, the voice's tone period, the device
        that paces them, after `first_chunk_ms` counted as waiting."""
        engine = self._engine
        schedule = [ms * SAMPLE_RATE // 1000 for ms in engine.chunk_schedule_ms]
        period = _tone_period(_tone_index(self.request.text, self._voice))
        device = engine.device if engine.device is not None else _Device(engine.device_rtf)
        engine._waiting += 1
        try:
            await asyncio.sleep(engine.first_chunk_ms / 1000)
        finally:
            engine._waiting -= 1
        self._stamps["queue"] = time.monotonic()
        return schedule, period, device

    async def _open_text(self) -> AsyncIterator[np.ndarray]:
        """A text_open request: tone audio for its text as the text arrives; nothing (no padding) while it has
        spoken all it has and the text is open; the end once the text ended and all of it is spoken."""
        cap = None if self.request.max_audio_ms is None else self.request.max_audio_ms * SAMPLE_RATE // 1000
        schedule, period, device = await self._first_chunk_wait()
        produced = 0
        for index in itertools.count():
            while not self._cancelled:
                owed = self._spoken_samples() if cap is None else min(cap, self._spoken_samples())
                if produced < owed or not self._text_open or produced == cap:
                    break
                self._more.clear()
                await self._more.wait()
            if self._cancelled or produced >= owed:
                break
            n = min(schedule[min(index, len(schedule) - 1)], owed - produced)
            await device.run(n)
            self._made()
            if self._cancelled:
                break
            yield _slice(period, n, produced)
            produced += n

    async def _whole_text(self) -> AsyncIterator[np.ndarray]:
        total = fake_duration_samples(self.request.text)
        if self.request.max_audio_ms is not None:
            total = min(total, self.request.max_audio_ms * SAMPLE_RATE // 1000)
        schedule, period, device = await self._first_chunk_wait()
        produced = 0
        for index in itertools.count():
            if produced >= total or self._cancelled:
                break
            n = min(schedule[min(index, len(schedule) - 1)], total - produced)
            await device.run(n)
            self._made()
            if self._cancelled:
                break
            yield _slice(period, n, produced)
            produced += n


class FakeEngine(Engine):
    """Options: `device_rtf` (audio-s per wall-s), `shared_device` (true: `device_rtf` is the total of all streams;
    false: of each stream), `chunk_ms` (one chunk length, or a schedule "320,640,1280" whose last entry repeats,
    like qwen3tts's 4, 8, 16 codec frames), `first_chunk_ms`, `text_streaming` (false: whole texts only, so the
    gateway's sentence mode can be tested on this engine too), `forecast` (true: admission by deadline judges new
    streams by the device, `admission_forecast`; false, the default: no opinion, so tests that overload the device
    on purpose, to make stalls, keep their streams)."""

    name = "fake"
    supports_instruct = False
    supports_word_times = True  # exact by construction: WORD_SAMPLES per word

    def __init__(self, device_rtf: float = 50.0, chunk_ms: int | str = 320, first_chunk_ms: float = 5.0,
                 shared_device: bool = True, text_streaming: bool = True, forecast: bool = False) -> None:
        try:  # strings from the command line
            schedule = [int(x) for x in str(chunk_ms).split(",") if x.strip()]
            device_rtf, first_chunk_ms = float(device_rtf), float(first_chunk_ms)
        except ValueError:
            raise ValueError(f"device_rtf and first_chunk_ms must be numbers, chunk_ms integers (got device_rtf="
                             f"{device_rtf!r}, chunk_ms={chunk_ms!r}, first_chunk_ms={first_chunk_ms!r})") from None
        if device_rtf <= 0 or not schedule or min(schedule) <= 0 or first_chunk_ms < 0:
            raise ValueError("device_rtf and chunk_ms must be positive, first_chunk_ms non-negative")
        self.device_rtf = float(device_rtf)
        self.chunk_schedule_ms = schedule
        self.chunk_ms = schedule[0]
        self.first_chunk_ms = float(first_chunk_ms)
        self.shared_device = bool(shared_device)
        self.supports_text_streaming = _flag(text_streaming)
        self.forecast = _flag(forecast)
        self.device = _Device(self.device_rtf) if self.shared_device else None
        self._ready = False
        self._waiting = 0
        self._streams = 0  # open streams: each holds 1x of the device until it ends (admission_forecast)
        self._last_end: float | None = None
        self._end_interval_s = DEFAULT_END_INTERVAL_S

    async def start(self) -> None:
        for k in range(256):  # every tone's period, once per process (~1 s, 25 MB), so none is made mid-stream
            _tone_period(k)
        self._ready = True

    async def stop(self) -> None:
        self._ready = False

    @property
    def ready(self) -> bool:
        return self._ready

    @property
    def queue_depth(self) -> int:
        return self._waiting

    def admission_forecast(self, queued: int = 0) -> Forecast | None:
        """With `forecast`, from the device: every open stream needs 1x of it (a shared device makes `device_rtf` x
        in all), and a new stream's first chunk waits for the work already reserved, then takes its own time."""
        if not self.forecast:
            return None
        n = self._streams + queued + 1
        load = (n if self.shared_device else 1) / self.device_rtf
        backlog = max(0.0, self.device.free_at - _now()) if self.device is not None else 0.0
        first = self.first_chunk_ms / 1000 + backlog + self.chunk_schedule_ms[0] / 1000 / self.device_rtf
        return Forecast(first, load, n, end_interval_s=self._end_interval_s)

    @property
    def open_streams(self) -> int:
        """Streams still making or handing over audio (a stream ends once its last chunk is taken)."""
        return self._streams

    def _stream_ended(self) -> None:
        self._streams -= 1
        now = time.monotonic()
        if self._last_end is not None:
            self._end_interval_s += 0.2 * (now - self._last_end - self._end_interval_s)
        self._last_end = now

    def info(self) -> dict[str, object]:
        return {"name": self.name, "device_rtf": self.device_rtf, "shared_device": self.shared_device,
                "chunk_ms": self.chunk_schedule_ms, "text_streaming": self.supports_text_streaming,
                "forecast": self.forecast}

    def voices(self) -> list[VoiceInfo]:
        return [VoiceInfo(DEFAULT_VOICE, "Tone A", ("en",)), VoiceInfo("tone-b", "Tone B", ("en",))]

    def open_stream(self, request: SynthesisRequest) -> FakeStream:
        voice = request.voice or DEFAULT_VOICE
        if voice not in {v.id for v in self.voices()}:
            raise EngineError("voice_not_found", f"voice {voice!r} not found; see GET /v1/voices")
        return FakeStream(self, request, voice)

"""Engine streams and audio for the held-stream tests (test_worker.py, test_progressive.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import numpy as np
from voxgate.engine.base import AudioStream, SynthesisRequest

from .clips import clip


class Chunks(AudioStream):
    """An engine stream that yields the given int16 chunks, one per `step` set by the test (None: all at once)."""

    def __init__(self, text: str, chunks: list[np.ndarray], step: asyncio.Event | None = None,
                 text_open: bool = False) -> None:
        self.request = SynthesisRequest(text, word_times=True, text_open=text_open)
        self.chunks, self.step = chunks, step
        self.cancelled = asyncio.Event()
        self.yielded = 0  # chunks yielded so far
        self.text_ended = not text_open

    def cancel(self) -> None:
        self.cancelled.set()

    def append_text(self, text: str) -> None:
        self.request.text += text

    def end_text(self) -> None:
        self.text_ended = True

    async def __aiter__(self) -> AsyncIterator[np.ndarray]:
        for chunk in self.chunks:
            if self.step is not None:
                await self.step.wait()
                self.step.clear()
            if self.cancelled.is_set():
                return
            self.yielded += 1
            yield chunk


def pcm(seconds: float, seed: int) -> np.ndarray:
    return np.round(clip(seconds, 24_000, seed) * 32767).astype(np.int16)

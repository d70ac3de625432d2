"""A stream with measured word times: an engine stream's audio held until the forced aligner has timed its words.

The aligner's decoder reads all of a clip's audio before the text (causal), so a word's time is known only once its
segment's audio is complete. Here a segment is the whole request: the gateway speaks a word-times context sentence
by sentence (one request per sentence, gateway/session/session.py), so each request is one sentence. The stream
collects every chunk of its request, submits the audio and the text to the `AlignerWorker`, and when the words come
back makes them available (`take_words`) and only then yields the held chunks: every word is out before any of its
audio. Times are samples from the stream's first sample (the segment starts there).

The cost: a request's first audio waits for all of its audio and one aligner pass. Requests after the first are
made and aligned while the earlier ones play (the gateway holds made audio anyway).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import numpy as np

from ..base import AudioStream, EngineError
from ..words import WordTime, text_words
from .worker import AlignerWorker, AlignJob


class AlignedStream(AudioStream):
    """`inner`'s chunks, unchanged and in order, released after its words are measured."""

    def __init__(self, inner: AudioStream, worker: AlignerWorker) -> None:
        self.request = inner.request
        self._inner = inner
        self._worker = worker
        self._text = inner.request.text  # grows with append_text (a text_open request's whole text is its segment)
        self._words: list[WordTime] = []
        self._job: AlignJob | None = None
        self._released_at: float | None = None
        self._cancelled = False

    # -- the inner stream's interface, passed through ------------------------------------------------------------
    def append_text(self, text: str) -> None:
        self._inner.append_text(text)
        self._text += text

    def end_text(self) -> None:
        self._inner.end_text()

    def can_append_text(self, text: str) -> bool:
        return self._inner.can_append_text(text)

    def report_playback(self, buffered_s: float) -> None:
        self._inner.report_playback(buffered_s)

    def first_audio_stamps(self) -> dict[str, float]:
        """The inner stream's stages; `hand_over` is when the held audio was released (its whole segment made and
        aligned), so the hold is counted in the engine's stages, not in the gateway's write."""
        stamps = self._inner.first_audio_stamps()
        if self._released_at is not None:
            stamps["hand_over"] = self._released_at
        return stamps

    # -- words -------------------------------------------------------------------------------------------------
    def take_words(self) -> list[WordTime]:
        words, self._words = self._words, []
        return [] if self._cancelled else words

    def cancel(self) -> None:
        self._cancelled = True
        self._words = []
        if self._job is not None:
            self._job.cancelled = True  # not measured if its batch is not taken yet
        self._inner.cancel()

    async def __aiter__(self) -> AsyncIterator[np.ndarray]:
        held = [chunk async for chunk in self._inner]  # the segment: complete before its words can be timed
        if self._cancelled:
            return
        audio = np.concatenate(held) if held else np.zeros(0, np.int16)
        if text_words(self._text) and len(audio):
            words = await self._measure(audio.astype(np.float32) / 32768.0)
            if self._cancelled:
                return
            self._words = words
        self._released_at = time.monotonic()
        for chunk in held:
            if self._cancelled:
                return
            yield chunk

    async def _measure(self, audio: np.ndarray) -> list[WordTime]:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[list[WordTime]] = loop.create_future()

        def settle(words: list[WordTime] | None, error: BaseException | None) -> None:  # on the event loop
            if done.done():
                return
            if error is not None:
                done.set_exception(EngineError("alignment_failed",
                                               f"word alignment failed: {type(error).__name__}: {error}"))
            else:
                done.set_result(words or [])

        def deliver(words: list[WordTime] | None, error: BaseException | None) -> None:  # on the worker thread
            try:
                loop.call_soon_threadsafe(settle, words, error)
            except RuntimeError:  # the event loop is gone: nobody waits
                pass

        self._job = job = AlignJob(audio, self._text, deliver)
        try:
            self._worker.submit(job)
        except RuntimeError as exc:
            raise EngineError("alignment_failed", f"word alignment failed: {exc}") from None
        try:
            return await done
        finally:
            job.cancelled = True  # answered or abandoned: never measured again

"""A stream with measured word times: an engine stream's audio held until the forced aligner has timed its words.

The gateway speaks a word-times context sentence by sentence (one request per sentence, gateway/session/session.py),
so a stream is one sentence. Its audio is released in pieces, each once every word that starts in it is timed:

- **Progressive** (`group_samples` > 0, the engine option `aligner_group_ms`): once `group_samples` of audio are
  held and the text is complete, the held audio (from the first untimed word's start on) goes to the aligner with
  the words not yet timed. The aligner's decoder is causal with the audio before the text, so a word's times depend
  on the audio and on the words before it, never on the words after it; but the clip's end cuts speech short, and
  the aligner places the words not yet spoken at or near that end. So only the words that end at least
  `margin_samples` before the clip's end are taken (a word ends where the next starts), and the audio up to the
  last one's end is released (a stream's first piece only once it covers the next: `_first_piece`). The next clip starts
  there, at the first untimed word, once another group has been made and the listener's lead (`ahead_samples`,
  2 groups by default) is running short: while it is ahead, the audio gathers into fewer, longer clips. When the
  inner stream ends, the rest is aligned whole and released. An aligner that places no word inside the margin
  leaves everything to that last call.
- **Whole** (`group_samples` 0): one call on the whole request's audio, then all of it, chunks unchanged.

Either way every word goes out (`take_words`) before any of its audio. Times are samples from the stream's first
sample: a clip's times are offset by where it starts.

**Not held** (`hold` False, the request's `word_times_hold`): no audio waits for the calls: each chunk goes out as
it is made, and the words of each answer as soon as it comes (an empty chunk hands them over: engine/words.py),
often after their audio has left but, since the audio is made faster than it plays, before the listener hears
them. The engine makes such streams whole by default (its option `aligner_not_held_group_ms`, 0: every second
aligned once); in pieces, the first piece keeps whatever words it times (no cover rule: no listener waits on it),
and the listener's lead that spaces the calls is counted from the first chunk's release.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections import deque
from collections.abc import AsyncIterator, Callable

import numpy as np

from ..base import SAMPLE_RATE, AudioStream, EngineError
from ..words import TextWord, WordTime, text_words
from .worker import AlignerWorker, AlignJob

# A clip's words beyond this rate are never spoken in it (speech runs ~2-4 words a second): a partial clip's prompt
# carries only these, the rest are left for later clips. The decoder is causal, so the words it carries are timed
# exactly as with the whole text after them.
MAX_WORDS_PER_SECOND = 8
_NO_AUDIO = np.zeros(0, dtype=np.int16)  # yielded (not held) to hand over words measured while no audio is due
# A stream's first piece is released only with at least this much audio, and at least FIRST_PIECE_COVER times what
# the next piece takes (a group made at the stream's own pace so far, and an aligner call as long as its last), else
# it waits for the next piece: once the listener plays it, the next piece must come before it runs out, even if
# that piece keeps no word and the one after it is needed. A stall mid-sentence is worse than a later start.
FIRST_PIECE_SAMPLES = SAMPLE_RATE * 4 // 10
FIRST_PIECE_COVER = 2


class AlignedStream(AudioStream):
    """`inner`'s audio, in order, released once the words that start in it are measured."""

    def __init__(self, inner: AudioStream, worker: AlignerWorker, group_samples: int = 0,
                 margin_samples: int = 0, ahead_samples: int | None = None,
                 clock: Callable[[], float] = time.monotonic, hold: bool = True) -> None:
        if group_samples < 0 or margin_samples < 0:
            raise ValueError("group_samples and margin_samples must be >= 0")
        self._hold = hold  # False: the audio goes out as it is made, the words when measured (module docstring)
        self._fresh: deque[np.ndarray] = deque()  # not held: made, not yet yielded
        # After the first piece, the next one is aligned only once the listener's lead falls below this (2 groups
        # by default): while it is ahead, the audio gathers into fewer, longer clips (fewer aligner calls).
        self._ahead = 2 * group_samples if ahead_samples is None else ahead_samples
        self._clock = clock
        self._first_out: float | None = None  # clock() at the first release
        self._first_in: float | None = None  # clock() when the first chunk came
        self._call_s = 0.0  # the last aligner call, submitted to answered (clock seconds)
        self.request = inner.request
        self._inner = inner
        self._worker = worker
        self._group, self._margin = group_samples, margin_samples
        self._text = inner.request.text  # grows with append_text until end_text
        self._text_closed = not inner.request.text_open
        self._words: list[WordTime] = []  # measured, not yet taken
        self._held: deque[np.ndarray] = deque()  # made, not yet timed: the audio from `_timed` on
        self._held_samples = 0
        self._made = 0  # samples the inner stream has yielded
        self._timed = 0  # every word that starts before this is measured (held: the samples released)
        self._next_word = 0  # the first word of the text not yet measured
        self._job: AlignJob | None = None
        self._wake = asyncio.Event()
        self._released_at: float | None = None
        self._cancelled = False
        self._expected = False  # not held: counted in the worker's expect() (making audio, no job out)

    # -- the inner stream's interface, passed through ------------------------------------------------------------
    def append_text(self, text: str) -> None:
        self._inner.append_text(text)
        self._text += text

    def end_text(self) -> None:
        self._inner.end_text()
        self._text_closed = True
        self._wake.set()

    def can_append_text(self, text: str) -> bool:
        return self._inner.can_append_text(text)

    def report_playback(self, buffered_s: float) -> None:
        self._inner.report_playback(buffered_s)

    def first_audio_stamps(self) -> dict[str, float]:
        """The inner stream's stages; `hand_over` is when the first held audio was released (its words made and
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
        self._wake.set()
        self._inner.cancel()

    async def __aiter__(self) -> AsyncIterator[np.ndarray]:
        reader = asyncio.ensure_future(self._read())
        answer: asyncio.Future[list[WordTime]] | None = None
        submit_at = self._group  # the next partial clip waits until this much audio is made
        clip, final = 0, False
        self._expect(True)
        try:
            while not self._cancelled:
                self._wake.clear()  # anything from here on (a chunk, an answer, a cancel) wakes the wait below
                if self._fresh:  # not held: the audio goes out as it comes
                    chunk = self._fresh.popleft()
                    if self._first_out is None:
                        self._first_out = self._clock()
                    yield chunk
                    continue
                if answer is not None and answer.done():
                    cut = self._accept(answer.result(), clip, final)  # raises the batch's EngineError
                    answer = self._job = None
                    for piece in self._release(cut):
                        yield piece
                        if self._cancelled:
                            return
                    if self._words and not self._hold:
                        yield _NO_AUDIO  # the words, now (their audio may be out already)
                        if self._cancelled:
                            return
                    if final:
                        return
                    self._expect(True)  # a partial clip answered: more to come
                    continue
                if reader.done():
                    reader.result()  # the inner stream's error, if it ended with one
                if answer is None:
                    words = text_words(self._text)[self._next_word:]
                    ended = reader.done()
                    if not words and self._text_closed:  # nothing (more) to time: the audio goes out as it comes
                        for piece in self._release(self._held_samples):
                            yield piece
                            if self._cancelled:
                                return
                        if ended:
                            return
                    elif ended and not self._held_samples:
                        return  # words never spoken: a budget cut after the last one measured
                    elif not ended and not self._hold and self._worker.behind():
                        pass  # not held, the aligner behind: one call when the sentence is made, no re-read
                    elif ended or (self._group and self._text_closed and self._made >= submit_at):
                        wait = 0.0 if ended else self._time_ahead()
                        if wait <= 0:
                            final, clip, submit_at = ended, self._held_samples, self._made + self._group
                            answer = self._submit(words, clip, final)
                            continue
                        with contextlib.suppress(TimeoutError):  # or sooner, on a chunk, an end, a cancel
                            await asyncio.wait_for(self._wake.wait(), wait)
                        continue
                await self._wake.wait()
        finally:
            reader.cancel()
            self._expect(False)
            if self._job is not None:
                self._job.cancelled = True  # answered or abandoned: never measured again

    def _expect(self, counted: bool) -> None:
        """Not held: whether the worker counts this stream as one that may bring a clip soon (AlignerWorker.expect:
        its not-held calls gather only while some stream may)."""
        if not self._hold and counted != self._expected:
            self._expected = counted
            self._worker.expect(1 if counted else -1)

    def _time_ahead(self) -> float:
        """Seconds until the listener's lead, the audio timed (held: released) less the time since the first
        release (as if playback began then: the real lead is longer), falls below `ahead` (<= 0: now)."""
        if self._first_out is None:
            return 0.0
        lead = self._timed / SAMPLE_RATE - (self._clock() - self._first_out)
        return lead - self._ahead / SAMPLE_RATE

    async def _read(self) -> None:
        try:
            async for chunk in self._inner:
                if self._first_in is None:
                    self._first_in = self._clock()
                self._held.append(chunk)
                self._held_samples += len(chunk)
                self._made += len(chunk)
                if not self._hold:
                    self._fresh.append(chunk)
                self._wake.set()
        finally:
            self._wake.set()

    def _submit(self, words: list[TextWord], samples: int, final: bool) -> asyncio.Future[list[WordTime]]:
        """The held audio (`samples` of it) and the untimed words, to the worker; the future gets its words."""
        if not final:  # words this clip cannot hold stay out of its prompt (MAX_WORDS_PER_SECOND)
            words = words[: 2 + samples * MAX_WORDS_PER_SECOND // SAMPLE_RATE]
        text = self._text[words[0].start: words[-1].end if not final else len(self._text)]
        audio = np.concatenate(list(self._held))[:samples].astype(np.float32) / 32768.0
        loop = asyncio.get_running_loop()
        done: asyncio.Future[list[WordTime]] = loop.create_future()

        sent = self._clock()

        def settle(timed: list[WordTime] | None, error: BaseException | None) -> None:  # on the event loop
            self._call_s = self._clock() - sent
            if not done.done():
                if error is not None:
                    done.set_exception(EngineError("alignment_failed",
                                                   f"word alignment failed: {type(error).__name__}: {error}"))
                else:
                    done.set_result(timed or [])
            self._wake.set()

        def deliver(timed: list[WordTime] | None, error: BaseException | None) -> None:  # on the worker thread
            try:
                loop.call_soon_threadsafe(settle, timed, error)
            except RuntimeError:  # the event loop is gone: nobody waits
                pass

        self._job = AlignJob(audio, text, deliver, hold=self._hold)
        self._expect(False)  # before the submit wakes the worker: this stream brings nothing more until answered
        try:
            self._worker.submit(self._job)
        except RuntimeError as exc:
            raise EngineError("alignment_failed", f"word alignment failed: {exc}") from None
        return done

    def _accept(self, timed: list[WordTime], samples: int, final: bool) -> int:
        """A clip's words (times from its start, `samples` long) -> the samples to release: a final clip's all, a
        partial clip's up to the end of the last word that ends `margin` before its end."""
        if not final:
            timed = list(itertools.takewhile(lambda w: w.end <= samples - self._margin, timed))
            if self._hold and self._timed == 0 and timed and timed[-1].end < self._first_piece():
                timed = []  # too short a first piece: the next one starts from here again
        offset = self._timed
        self._words += [WordTime(w.word, offset + w.start, offset + w.end) for w in timed]
        self._next_word += len(timed)
        if final:
            return self._held_samples
        return timed[-1].end if timed else 0

    def _first_piece(self) -> int:
        """Samples the first piece needs: FIRST_PIECE_SAMPLES, or FIRST_PIECE_COVER x (a group at the pace the
        audio has come so far + the last call's time), whichever is more."""
        made_s = self._made / SAMPLE_RATE
        pace = (self._clock() - self._first_in) / made_s if self._first_in is not None and made_s else 0.0
        next_piece_s = self._group / SAMPLE_RATE * pace + self._call_s
        return max(FIRST_PIECE_SAMPLES, round(FIRST_PIECE_COVER * next_piece_s * SAMPLE_RATE))

    def _release(self, samples: int) -> list[np.ndarray]:
        """The first `samples` of the held audio, as the chunks they were made in (the last one split); not held:
        none (they went out as they came), the timed audio only dropped."""
        pieces: list[np.ndarray] = []
        while samples > 0:
            chunk = self._held.popleft()
            if len(chunk) > samples:
                self._held.appendleft(chunk[samples:])
                chunk = chunk[:samples]
            pieces.append(chunk)
            samples -= len(chunk)
            self._held_samples -= len(chunk)
            self._timed += len(chunk)
        if not self._hold:
            return []
        if pieces and self._released_at is None:
            self._released_at, self._first_out = time.monotonic(), self._clock()
        return pieces

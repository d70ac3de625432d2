"""One context (a turn): its text segments, the producer task that synthesizes them, and its ready frames."""

from __future__ import annotations

import asyncio
import enum
import functools
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from voxgate.engine.base import SAMPLE_RATE, AudioStream, Engine, EngineError, SynthesisRequest
from voxgate.engine.timeline import FirstAudioTimeline
from voxgate.gateway.audio.frames import EncodedFrame, FrameEncoder
from voxgate.gateway.transport.loop_turns import LoopTurns

from .context_text import ContextText, Cut, OpenStream
from .stalls import StallStats
from .text_split import TextSegmenter
from .words import WordMark, word_mark

log = logging.getLogger("voxgate.context")

# Synthesis runs at most this far ahead of sending: a reader that stops reading stops the engine too, so memory
# per context stays bounded and engine time goes to streams whose listeners need it.
MAX_AHEAD_S = 20.0


def _takes_hints(stream: AudioStream) -> bool:
    """Whether the engine overrides `report_playback` (computing hints for one that ignores them is waste)."""
    return type(stream).report_playback is not AudioStream.report_playback


class ContextState(enum.Enum):
    OPEN = "open"  # text may still arrive
    ENDING = "ending"  # context.end received; speaking what is left
    DONE = "done"
    CANCELLED = "cancelled"


@dataclass(slots=True)
class ReadyFrame:
    frame: EncodedFrame
    ready_at: float


@dataclass(slots=True)
class FlushMark:
    flush_id: str | int


@dataclass(slots=True)
class _Segment:
    text: str


@dataclass(slots=True)
class Context:
    context_id: str
    ctx: int  # the numeric handle in binary frames
    track: int
    voice: str | None
    language: str | None
    instruct: str | None
    budget_samples: int  # 24 kHz samples this context may produce (the runaway guard)
    budget_from_client: bool
    encoder: FrameEncoder
    state: ContextState = ContextState.OPEN
    segmenter: TextSegmenter = field(default_factory=TextSegmenter)
    frames: deque[ReadyFrame | FlushMark | WordMark] = field(default_factory=deque)
    produced_all: bool = False  # the producer has queued the final frame (or was stopped)
    started: bool = False  # context.started was queued; start_pts is set
    start_pts: int = 0
    end_pts: int = 0  # the track's position after this context's last frame handed to the writer (set by Track)
    produced_samples: int = 0  # 24 kHz samples synthesized
    chars: int = 0
    speakable_at: float | None = None
    first_written_at: float | None = None
    timeline: FirstAudioTimeline | None = None  # its first audio's stages, from its first chunk on (metrics.py)
    stalls: StallStats = field(default_factory=StallStats)
    failed_segments: int = 0
    pending_flushes: int = 0  # flushes whose `flushed` has not gone to the writer (limits.max_pending_flushes)
    queued_chars: int = 0  # text cut into segments whose requests have not ended (queued or being spoken)
    ready_samples: int = 0  # timeline samples in `frames`
    ready_frames: int = 0  # ReadyFrames in `frames`
    max_ahead_samples: int = 0  # set by the session from the timeline rate
    timeline_rate: int = SAMPLE_RATE
    listener_buffered: Callable[[], int] | None = None  # timeline samples the listener holds or will (set by Track)
    stream: AudioStream | None = None  # the engine stream speaking now
    release_admission: Callable[[], None] | None = None  # load.py: admitted until the engine counts its stream
    counted: bool = False  # the outcome went into the metrics
    turns: LoopTurns | None = None  # the bound on chunks taken in per event-loop iteration (transport/loop_turns.py)
    feed: ContextText | None = None  # text streaming (context_text.py); None: sentence mode (`segmenter`)
    word_times: bool = False  # the session asked for word timestamps and the engine measures them (words.py)
    word_times_hold: bool = True  # False: no audio waits for its word times (SynthesisRequest.word_times_hold)
    _drained: asyncio.Event = field(default_factory=asyncio.Event)
    _segments: asyncio.Queue = field(default_factory=asyncio.Queue)
    producer: asyncio.Task | None = None

    @property
    def cancelled(self) -> bool:
        return self.state is ContextState.CANCELLED

    @property
    def active(self) -> bool:
        return self.state in (ContextState.OPEN, ContextState.ENDING)

    @property
    def sent_samples(self) -> int:
        """Timeline samples handed to the writer."""
        return self.end_pts - self.start_pts if self.started else 0

    @property
    def unspoken_chars(self) -> int:
        """Text accepted and not yet spoken (limits.max_buffered_text_chars): buffered, queued, or held by an engine
        request that has not ended."""
        if self.feed is not None:
            return self.feed.unspoken_chars
        return self.segmenter.buffered_chars + self.queued_chars

    def pop(self) -> ReadyFrame | FlushMark | WordMark:
        item = self.frames.popleft()
        if isinstance(item, ReadyFrame):
            self.ready_samples -= item.frame.samples
            self.ready_frames -= 1
            self._drained.set()
        elif isinstance(item, FlushMark):
            self.pending_flushes -= 1
        return item

    def drop_ready(self) -> None:
        self.frames.clear()
        self.ready_samples = self.ready_frames = self.pending_flushes = 0
        self._drained.set()

    def hint_playback(self) -> None:
        """Tell the engine how much audio this context's listener holds (issue 12's deadline scheduling)."""
        if self.stream is not None and self.listener_buffered is not None and _takes_hints(self.stream):
            self.stream.report_playback(max(0, self.listener_buffered()) / self.timeline_rate)

    def first_audio_ms(self) -> float | None:
        if self.first_written_at is None or self.speakable_at is None:
            return None
        return round((self.first_written_at - self.speakable_at) * 1000, 3)

    def timing(self) -> dict[str, object]:
        """context.done's `timing`: first audio, and its stages when the way to it was stamped (engine/timeline.py)."""
        timing: dict[str, object] = {"first_audio_ms": self.first_audio_ms()}
        if self.timeline is not None and "write" in self.timeline.ends:
            timing["first_audio_stages_ms"] = {stage: round(s * 1000, 3) for stage, s in self.timeline.stages()}
        return timing

    # ---- text in (called by the session, synchronously) -----------------------------------------------------

    def _enqueue(self, segments: list[str]) -> None:
        for text in segments:
            if self.speakable_at is None:
                self.speakable_at = time.monotonic()
            self.queued_chars += len(text)
            self._segments.put_nowait(_Segment(text))

    def append_text(self, text: str) -> None:
        self.chars += len(text)
        if self.feed is not None:
            self.feed.add(text)
            return
        self._enqueue(self.segmenter.append(text))

    def flush(self, flush_id: str | int) -> None:
        self.pending_flushes += 1
        if self.feed is not None:
            self.feed.cut(flush_id)
            return
        self._enqueue(self.segmenter.flush())
        if self.speakable_at is None:
            self.speakable_at = time.monotonic()
        self._segments.put_nowait(Cut(flush_id))

    def end(self) -> None:
        if self.feed is not None:
            self.state = ContextState.ENDING
            self.feed.cut(None)
            return
        self._enqueue(self.segmenter.flush())
        if self.speakable_at is None:
            self.speakable_at = time.monotonic()
        self.state = ContextState.ENDING
        self._segments.put_nowait(Cut(None))

    # ---- synthesis (the producer task) ------------------------------------------------------------------------

    def forget_producer(self, task: asyncio.Task) -> None:
        """The producer ended: dropped, so the context (in its frames) and the task are freed by reference counting."""
        if self.producer is task:
            self.producer = None

    async def produce(self, engine: Engine, wake: Callable[[], None],
                      report: Callable[[str, str, str], None]) -> None:
        """Synthesize the context's text in order until the end mark; push frames and wake the track's sender.

        `report(kind, code, message)` sends a warning or error about this context to the client.
        """
        if self.feed is not None:
            await self._produce_streamed(engine, wake, report)
            return
        while True:
            item = await self._segments.get()
            if isinstance(item, Cut):
                if self._cut(item, wake):
                    return
                continue
            try:
                await self._speak(engine, SynthesisRequest(item.text, self.voice, self.language, self.instruct),
                                  wake, report)
            finally:
                self.queued_chars -= len(item.text)  # spoken (or dropped): no longer held

    async def _produce_streamed(self, engine: Engine, wake: Callable[[], None],
                                report: Callable[[str, str, str], None]) -> None:
        """Text streaming (context_text.py): one engine stream per stretch of text the rule streams, whole-text
        requests for the sentences it does not."""
        feed = self.feed
        assert feed is not None

        def on_error(exc: EngineError) -> None:  # the engine refused streamed text: the feed drops the rest
            self.failed_segments += 1
            report("error", exc.code, exc.message)

        feed.on_error = on_error
        try:
            while True:
                item = feed.next_request()
                if item is None:
                    feed.changed.clear()
                    await feed.changed.wait()
                    continue
                if isinstance(item, Cut):
                    if self._cut(item, wake):
                        return
                    continue
                if self.speakable_at is None:
                    self.speakable_at = feed.last_event_at
                request = SynthesisRequest(item.text, self.voice, self.language, self.instruct,
                                           text_open=isinstance(item, OpenStream))
                opened = functools.partial(feed.opened, request=item) if isinstance(item, OpenStream) else None
                try:
                    await self._speak(engine, request, wake, report, opened)
                finally:
                    feed.closed()
        finally:
            feed.close()

    def _cut(self, cut: Cut, wake: Callable[[], None]) -> bool:
        """A flush point or the end: the encoder's tail, the mark; True at the end (nothing more to produce)."""
        self._push(self.encoder.cut())
        if cut.flush_id is not None:
            self.frames.append(FlushMark(cut.flush_id))
            wake()
            return False
        self.produced_all = True
        wake()
        return True

    async def _speak(self, engine: Engine, request: SynthesisRequest, wake: Callable[[], None],
                     report: Callable[[str, str, str], None],
                     opened: Callable[[AudioStream], None] | None = None) -> None:
        """One engine request, its chunks encoded and queued as they come (`opened`: told of the stream, which
        then takes more text while it speaks)."""
        remaining = self.budget_samples - self.produced_samples
        if remaining <= 0:
            return  # budget spent: the rest is dropped (reported once, when it ran out)
        request.max_audio_ms = max(1, remaining * 1000 // SAMPLE_RATE)
        request.word_times = self.word_times
        request.word_times_hold = self.word_times_hold
        offset = self.produced_samples  # where this stream's audio starts on the context's timeline
        if self.release_admission is not None:
            self.release_admission()  # the engine's queue counts this stream from here
        opened_at = time.monotonic()
        try:
            stream = self.stream = engine.open_stream(request)
        except EngineError as exc:
            self.failed_segments += 1
            report("error", exc.code, exc.message)
            return
        chunks = aiter(stream)
        try:
            if opened is not None:
                opened(stream)
            self.hint_playback()
            async for chunk in chunks:
                turn = self.turns.take() if self.turns is not None else None
                if turn is not None:
                    await turn
                if self.timeline is None and len(chunk) and self.speakable_at is not None:
                    self.timeline = FirstAudioTimeline(self.speakable_at, {"admit": opened_at,
                                                                           **stream.first_audio_stamps()})
                self._queue_words(stream, offset)  # before the frames of the chunk that holds their start
                if not len(chunk):  # words handed over with no audio (a stream that does not hold its audio)
                    wake()
                    continue
                chunk = chunk[: self.budget_samples - self.produced_samples]
                self.produced_samples += len(chunk)
                self._push(await self.encoder.encode(np.ascontiguousarray(chunk, dtype=np.int16)))
                wake()
                self.hint_playback()
                while self.max_ahead_samples and self.ready_samples > self.max_ahead_samples:
                    self._drained.clear()
                    await self._drained.wait()
                if self.produced_samples >= self.budget_samples:
                    if not self.budget_from_client:
                        report("warning", "audio_limit",
                               "context reached limits.max_context_audio_s; the rest of its text is dropped")
                    if self.word_times and not self.word_times_hold:
                        # its audio is all out, but its last piece's words are still being measured: the stream
                        # ends here (the engine has the budget as max_audio_ms), its words are taken as they come
                        async for _ in chunks:
                            self._queue_words(stream, offset)
                            wake()
                    break
        except EngineError as exc:
            self.failed_segments += 1
            report("error", exc.code, exc.message)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # an engine bug must not take the session down
            log.exception("engine failed on context %s", self.context_id)
            self.failed_segments += 1
            report("error", "synthesis_failed", f"synthesis failed: {type(exc).__name__}")
        finally:
            stream.cancel()
            self.stream = None
            # Closed here, not left to asyncio's async-generator finalizer (a task per stream, later).
            aclose = getattr(chunks, "aclose", None)
            if aclose is not None:
                await aclose()

    def _queue_words(self, stream: AudioStream, offset: int) -> None:
        """The stream's words measured so far (a word-times context), on the context's timeline, into the queue."""
        if self.word_times and (mark := word_mark(stream.take_words(), offset, self.budget_samples)):
            self.frames.append(mark)

    def _push(self, frames: list[EncodedFrame]) -> None:
        now = time.monotonic()
        for f in frames:
            self.frames.append(ReadyFrame(f, now))
            self.ready_samples += f.samples
        self.ready_frames += len(frames)

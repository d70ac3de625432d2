"""A track: one timeline of contexts played in order, and the one owner of its position.

`Track.pts` is the only position: the sender advances it frame by frame (`_advance`), a cancel rewinds it
(`withdraw`), and everything else reads it (the pacer, each context's `end_pts`, the frame log for stalls).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from voxgate.gateway.audio.frames import AudioFormat
from voxgate.gateway.protocol import FLAG_CODEC_RESET, FLAG_FIRST, FLAG_LAST, Playback
from voxgate.gateway.transport.loop_lag import LagHistory
from voxgate.gateway.transport.writer import OutFrame, SocketWriter

from .context import Context, FlushMark, ReadyFrame
from .pacer import Pacer
from .stalls import CAUSES, FrameLog, NewStalls, PlayHistory, UnderrunLedger
from .words import WordMark, timestamps_event


class Track:
    def __init__(self, number: int, fmt: AudioFormat, pacing: dict[str, Any], writer: SocketWriter,
                 on_finish: Callable[[Context], None], loop_lags: LagHistory | None = None) -> None:
        self.number = number
        self.loop_lags = loop_lags  # the gateway's recent event-loop lags, for `pacing` stalls
        self.fmt = fmt
        self.writer = writer
        self.on_finish = on_finish  # a context's last frame (and its flush marks) are queued
        self.pts = 0  # samples handed to the writer on this track: the position
        self.frames_sent = 0
        self.queue: deque[Context] = deque()  # contexts in play order; the head is playing
        self.history = PlayHistory()  # the contexts started here, for placing stalls
        self.current: Context | None = None  # the context started last (its context.done may still report stalls)
        self.stall_causes: dict[str, int] = dict.fromkeys(CAUSES, 0)  # stall events on this track, by cause
        self.wake = asyncio.Event()
        self.log = FrameLog()
        self.underruns = UnderrunLedger(fmt.sample_rate)
        self.pacer = Pacer(pacing["mode"], fmt.sample_rate, pacing["target_buffer_ms"], pacing["max_buffer_ms"],
                           pacing["feedback_interval_ms"], timeline=self)
        self.inflight: OutFrame | None = None  # a frame the sender is waiting to queue (the writer is full)
        self.flagged_last: Context | None = None  # the context whose frame with LAST was handed to the writer
        self._codec_reset = FLAG_CODEC_RESET if fmt.codec == "opus" else 0
        self._max_samples = fmt.frame_samples

    # ---- contexts ------------------------------------------------------------------------------------------

    def add(self, context: Context) -> None:
        self.queue.append(context)
        context.timeline_rate = self.fmt.sample_rate
        # Hints only where the server knows playback: client_clock reports it, realtime paces it. An asap client
        # plays on its own clock, which the server cannot see; a 1x guess from the track's first frame grows with
        # every context it speaks faster than real time, and would make the engine hold the stream back as "far
        # ahead" (max_ahead_s). Without hints the engine assumes 1x playback from each stream's first chunk.
        if self.pacer.mode != "asap":
            context.listener_buffered = lambda: self.listener_buffered(context)

    def listener_buffered(self, context: Context) -> int:
        """Samples the listener of `context` holds or will hold before it runs dry: what was sent and not yet
        played, plus what is made and not sent, of this context and of those that play before it."""
        ahead = self.pts - self.pacer.estimated_played()
        for other in self.queue:
            ahead += other.ready_samples
            if other is context:
                break
        return ahead

    def metrics_message(self) -> dict[str, Any]:
        """The `metrics` message of this track (every `metrics_interval_ms`)."""
        return {"type": "metrics", "track": self.number,
                "buffer_ms": round(self.pacer.buffered() * 1000 / self.fmt.sample_rate, 1),
                "target_ms": self.pacer.target_ms,
                "underruns": {"events": self.underruns.events, "by_cause": dict(self.stall_causes)}}

    def on_playback(self, msg: Playback) -> NewStalls | None:
        """A checked playback report: moves the pacer, hints the engine; the new stalls it shows, attributed."""
        self.underruns.check(msg, self.pts, self.frames_sent)
        before = self.pacer.last_report
        self.pacer.on_report(msg.played_pts, msg.buffered_samples)
        stalls = self.underruns.accept(msg, before, self.history, self.current, self.log)
        if stalls is not None and stalls.cause == "pacing" and self.loop_lags is not None:
            # the pacer's choice, or a starved process? The loop's lags from when the frame was due to go out
            since = stalls.needed_at - self.pacer.target_ms / 1000
            stalls.loop_held_ms = 1000 * self.loop_lags.held_s(since, stalls.needed_at + stalls.total_ms / 1000)
        if stalls is not None:
            self.stall_causes[stalls.cause] += stalls.events
            if stalls.context is not None:
                stalls.context.stalls.add(stalls.events, stalls.total_ms, stalls.cause)
            if stalls.cause in ("pacing", "network"):
                self.pacer.grow_target()
        for context in self.queue:
            context.hint_playback()
        self.wake.set()
        return stalls

    # ---- cancel: the rewind ---------------------------------------------------------------------------------

    def withdraw(self, context: Context) -> tuple[int, bool]:
        """Take back what the writer has not sent of a cancelled `context` and rewind the position.

        Returns the samples withdrawn and whether the client saw the context start."""
        withdrawn, started_withdrawn = self.writer.withdraw(context)
        if self.inflight is not None and self.inflight.owner is context:
            withdrawn += self.inflight.samples  # the sender is waiting to queue it; it never will
        self.pts -= withdrawn
        context.end_pts -= withdrawn
        self.log.rewind(self.pts)
        self.pacer.on_cancel()  # the client drops what it buffered of this context
        return withdrawn, not started_withdrawn

    def remove(self, context: Context) -> None:
        if context in self.queue:
            self.queue.remove(context)
        context.listener_buffered = None  # the closure refers to the context: a cycle only the collector could free
        self.wake.set()

    # ---- the sender ---------------------------------------------------------------------------------------

    async def run(self) -> None:
        while True:
            self.wake.clear()
            context = self.queue[0] if self.queue else None
            if context is None:
                await self.wake.wait()
                continue
            if not context.started:
                context.started, context.start_pts, context.end_pts = True, self.pts, self.pts
                self.current = context
                self.history.add(self.pts, context.context_id)
                self.writer.put_event({"type": "context.started", "context_id": context.context_id,
                                       "ctx": context.ctx, "track": self.number, "start_pts": self.pts}, context)
            if context.frames:
                if isinstance(context.frames[0], FlushMark):
                    mark = context.pop()
                    assert isinstance(mark, FlushMark)
                    self.writer.put_event({"type": "flushed", "context_id": context.context_id,
                                           "flush_id": mark.flush_id, "end_pts": context.end_pts}, context)
                    continue
                if isinstance(context.frames[0], WordMark):
                    words = context.pop()
                    assert isinstance(words, WordMark)
                    self.writer.put_event(timestamps_event(context.context_id, context.ctx, words), context)
                    continue
                allowance = self.pacer.allowance()
                if allowance is not None and allowance <= 0:
                    # A timer sets the event rather than asyncio.wait_for, which on 3.11 can swallow a cancel.
                    timer = asyncio.get_running_loop().call_later(self.pacer.seconds_until_allowed(1), self.wake.set)
                    try:
                        await self.wake.wait()
                    finally:
                        timer.cancel()
                    continue
                await self._send_frame(context)
                continue
            if context.produced_all:
                if self.flagged_last is not context:
                    # Its last audio frame went out before the end was known (an end after a flush, or no audio at
                    # all): the frame with LAST is an empty one. The loop looks again (a cancel may come meanwhile).
                    await self._queue(context, self.last_frame(context))
                    continue
                self.queue.popleft()
                context.listener_buffered = None  # (a reference cycle, as in `remove`)
                self.on_finish(context)
                continue
            await self.wake.wait()

    def _take_long(self, context: Context, ready: ReadyFrame) -> tuple[bytes, int, float]:
        """Long frames: the ready audio that follows joins this frame, up to `frame_ms` (a backlog is sent in
        fewer, longer messages; nothing waits for audio that does not exist yet)."""
        parts, samples, ready_at = [ready.frame.payload], ready.frame.samples, ready.ready_at
        frames = context.frames
        while frames and isinstance(frames[0], ReadyFrame) and samples + frames[0].frame.samples <= self._max_samples:
            more = context.pop()
            assert isinstance(more, ReadyFrame)
            parts.append(more.frame.payload)
            samples += more.frame.samples
            ready_at = more.ready_at
        return (parts[0] if len(parts) == 1 else b"".join(parts)), samples, ready_at

    async def _send_frame(self, context: Context) -> None:
        ready = context.pop()
        assert isinstance(ready, ReadyFrame)
        flags = ready.frame.flags
        if self.fmt.long_frames:
            payload, samples, ready_at = self._take_long(context, ready)
        else:
            payload, samples, ready_at = ready.frame.payload, ready.frame.samples, ready.ready_at
        if context.end_pts == context.start_pts:
            flags |= FLAG_FIRST | self._codec_reset
        if context.produced_all and not context.ready_frames:
            flags |= FLAG_LAST
        out = OutFrame(context, self.fmt.codec_id, flags, context.ctx, self.number, samples, self.pts, payload)
        # Advance before the await: a cancel during the await withdraws the frame and rewinds (`withdraw`).
        self._advance(context, samples, ready_at)
        await self._queue(context, out)

    def last_frame(self, context: Context) -> OutFrame:
        """An empty frame with LAST at the context's end (FIRST too when none of its frames went out)."""
        flags = FLAG_LAST
        if context.end_pts == context.start_pts:
            flags |= FLAG_FIRST | self._codec_reset
        return OutFrame(context, self.fmt.codec_id, flags, context.ctx, self.number, 0, context.end_pts, b"")

    async def _queue(self, context: Context, out: OutFrame) -> None:
        if out.flags & FLAG_LAST:
            self.flagged_last = context
        self.inflight = out
        try:
            await self.writer.put_frame(out)  # False (not queued) if a cancel came meanwhile: it was rewound
        finally:
            self.inflight = None

    def _advance(self, context: Context, samples: int, ready_at: float) -> None:
        self.pacer.before_send()
        self.log.add(self.pts, samples, ready_at, time.monotonic())
        self.pts += samples
        context.end_pts = self.pts
        self.frames_sent += 1

"""One Session per WebSocket: contexts, tracks (pacing + sending), cancel, stall attribution.

Threading model: everything runs on the event loop. The reader (ws.py) calls `handle()` for each message;
handlers are synchronous, so a cancel takes effect between two awaits of every other task. Producer tasks (one
per context) synthesize; sender tasks (one per track) pace frames into the socket writer.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
import uuid
from typing import Any

from voxgate.engine.base import SAMPLE_RATE, Engine

from .audio import AudioFormat, make_encoder
from .config import GatewayConfig
from .context import MAX_AHEAD_S, Context, ContextState, FlushMark, ReadyFrame
from .metrics import GatewayMetrics
from .pacer import Pacer, PlaybackReport
from .protocol import (
    FLAG_CODEC_RESET,
    FLAG_FIRST,
    FLAG_LAST,
    PACING_MODES,
    PROTOCOL,
    Clear,
    ContextCancel,
    ContextEnd,
    ContextFlush,
    ContextOpen,
    FrameHeader,
    Message,
    Ping,
    Playback,
    ProtocolError,
    SessionStart,
    TextAppend,
    invalid,
)
from .stalls import FrameRecord
from .track import Track
from .voices import resolve_voice
from .writer import OutFrame, SocketWriter

log = logging.getLogger("voxgate.session")


class Session:
    def __init__(self, engine: Engine, config: GatewayConfig, metrics: GatewayMetrics, writer: SocketWriter) -> None:
        self.engine = engine
        self.config = config
        self.limits = config.limits
        self.metrics = metrics
        self.writer = writer
        self.session_id = uuid.uuid4().hex
        self.started = False
        self.fmt = AudioFormat()
        self.contexts: dict[str, Context] = {}
        self.used_ids: set[str] = set()
        self.tracks: dict[int, Track] = {}
        self._handles = itertools.count(1)
        self._flush_ids = itertools.count(1)
        self._defaults: dict[str, Any] = {}
        self._pacing: dict[str, Any] = {}
        self._tasks: set[asyncio.Task] = set()
        self.draining = False  # shutdown: no new context (drain.py)

    # ---- lifecycle ------------------------------------------------------------------------------------------

    @property
    def active_contexts(self) -> int:
        return sum(1 for c in self.contexts.values() if c.active)

    async def close(self) -> None:
        for context in list(self.contexts.values()):
            if context.active:
                self._stop(context, ContextState.CANCELLED, outcome="disconnected")
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def begin_drain(self, grace_s: float) -> None:
        """Shutdown (drain.py): tell the client, and open no new context; live ones go on until the grace ends."""
        self.draining = True
        self.writer.put_urgent({"type": "session.draining", "grace_ms": round(grace_s * 1000)})

    def _spawn(self, coro: Any) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("session %s task failed", self.session_id, exc_info=task.exception())

    # ---- messages -------------------------------------------------------------------------------------------

    def handle(self, msg: Message) -> None:
        if not self.started and not isinstance(msg, SessionStart):
            raise ProtocolError("protocol_violation", f"{msg.TYPE} before session.start", close_code=4400)
        handler = getattr(self, "_on_" + type(msg).__name__)
        handler(msg)

    def _on_SessionStart(self, msg: SessionStart) -> None:
        if self.started:
            raise invalid("session.start was already received")
        self.fmt = AudioFormat.negotiate(msg.audio)
        defaults = self.config.pacing
        pacing = {"mode": msg.pacing.get("mode", defaults.mode),
                  "target_buffer_ms": msg.pacing.get("target_buffer_ms", defaults.target_buffer_ms),
                  "max_buffer_ms": msg.pacing.get("max_buffer_ms", defaults.max_buffer_ms),
                  "feedback_interval_ms": msg.feedback_interval_ms}
        if pacing["mode"] not in PACING_MODES:
            raise invalid(f"pacing.mode must be one of {list(PACING_MODES)}")
        if not 20 <= pacing["target_buffer_ms"] <= pacing["max_buffer_ms"] <= 10_000:
            raise invalid("pacing needs 20 <= target_buffer_ms <= max_buffer_ms <= 10000")
        voice = self._check_voice(msg.defaults.get("voice") or self.engine.default_voice(), None)
        self._defaults = {"voice": voice, "language": msg.defaults.get("language"),
                          "instruct": msg.defaults.get("instruct")}
        self._pacing = pacing
        self.metrics_interval_ms = msg.metrics_interval_ms
        self.started = True
        self.writer.put_urgent({
            "type": "session.started", "session_id": self.session_id, "protocol": PROTOCOL,
            "engine": self.engine.name, "audio": self.fmt.to_json(), "pacing": pacing,
            "limits": self.limits.to_json(), "voices": [v.id for v in self.engine.voices()],
            "defaults": {"voice": voice, "language": self._defaults["language"]},
        })
        if self.metrics_interval_ms:
            self._spawn(self._send_metrics())

    def _check_voice(self, voice: str | None, context_id: str | None) -> str | None:
        """The engine's own id for `voice` (`Tone-A` -> `tone-a`), or voice_not_found."""
        if voice is None:
            return None
        resolved = resolve_voice(self.engine, voice)
        if resolved is None:
            raise ProtocolError("voice_not_found", f"voice {voice!r} not found; see GET /v1/voices",
                                context_id=context_id)
        return resolved

    def _open(self, context_id: str, opts: ContextOpen | None) -> Context:
        if self.draining:
            raise ProtocolError("shutting_down", "the server is shutting down; no new contexts", context_id=context_id)
        if context_id in self.used_ids:
            raise invalid(f"context_id {context_id!r} was already used in this session", context_id)
        if self.active_contexts >= self.limits.max_contexts:
            raise ProtocolError("context_limit", f"at most {self.limits.max_contexts} active contexts per session",
                                context_id=context_id)
        opts = opts or ContextOpen(context_id=context_id)
        voice = self._check_voice(opts.voice or self._defaults["voice"], context_id)
        limit = int(self.limits.max_context_audio_s * SAMPLE_RATE)
        budget = limit if opts.max_audio_ms is None else min(limit, opts.max_audio_ms * SAMPLE_RATE // 1000)
        track = self._track(opts.track)
        if opts.placement == "replace":
            for other in list(track.queue):
                self._cancel(other, None)
        context = Context(context_id, next(self._handles), opts.track, voice,
                          opts.language or self._defaults["language"], opts.instruct or self._defaults["instruct"],
                          budget, opts.max_audio_ms is not None and opts.max_audio_ms * SAMPLE_RATE // 1000 < limit,
                          make_encoder(self.fmt))
        if context.instruct and not self.engine.supports_instruct:
            self._report(context, "warning", "unsupported", f"the {self.engine.name} engine ignores instruct")
        context.max_ahead_samples = int(MAX_AHEAD_S * self.fmt.sample_rate)
        self.used_ids.add(context_id)
        self.contexts[context_id] = context
        track.queue.append(context)
        context.producer = self._spawn(context.produce(
            self.engine, track.wake.set, lambda kind, code, message: self._report(context, kind, code, message)))
        self.metrics.contexts_active.inc()
        return context

    def _report(self, context: Context, kind: str, code: str, message: str) -> None:
        self.metrics.errors.labels(code).inc()
        self.writer.put_urgent({"type": kind, "code": code, "message": message, "context_id": context.context_id,
                                "fatal": False})

    def _active(self, context_id: str) -> Context:
        context = self.contexts.get(context_id)
        if context is None or not context.active:
            raise ProtocolError("unknown_context", f"context {context_id!r} is not active", context_id=context_id)
        return context

    def _on_ContextOpen(self, msg: ContextOpen) -> None:
        self._open(msg.context_id, msg)

    def _on_TextAppend(self, msg: TextAppend) -> None:
        if len(msg.text) > self.limits.max_text_chars:
            raise ProtocolError("text_too_long", f"text over limits.max_text_chars ({self.limits.max_text_chars})",
                                context_id=msg.context_id)
        context = self.contexts.get(msg.context_id)
        if context is None:
            context = self._open(msg.context_id, None)
        elif context.state is not ContextState.OPEN:
            raise ProtocolError("unknown_context", f"context {msg.context_id!r} has ended; open a new one",
                                context_id=msg.context_id)
        if context.unspoken_chars + len(msg.text) > self.limits.max_buffered_text_chars:
            raise ProtocolError("text_too_long", "unspoken text over limits.max_buffered_text_chars "
                                f"({self.limits.max_buffered_text_chars})", context_id=msg.context_id)
        context.append_text(msg.text)

    def _on_ContextFlush(self, msg: ContextFlush) -> None:
        context = self._active(msg.context_id)
        if context.state is not ContextState.OPEN:
            raise ProtocolError("unknown_context", f"context {msg.context_id!r} has ended", context_id=msg.context_id)
        context.flush(msg.flush_id if msg.flush_id is not None else next(self._flush_ids))

    def _on_ContextEnd(self, msg: ContextEnd) -> None:
        context = self._active(msg.context_id)
        if context.state is ContextState.ENDING:
            raise ProtocolError("unknown_context", f"context {msg.context_id!r} already ended",
                                context_id=msg.context_id)
        context.end()

    def _on_ContextCancel(self, msg: ContextCancel) -> None:
        self._cancel(self._active(msg.context_id), msg.played_pts)

    def _on_Clear(self, _msg: Clear) -> None:
        for context in list(self.contexts.values()):
            if context.active:
                self._cancel(context, None)

    def _on_Ping(self, msg: Ping) -> None:
        self.writer.put_urgent({"type": "pong", "t_ms": msg.t_ms, "server_time_ms": round(time.time() * 1000, 3)})

    def _on_Playback(self, msg: Playback) -> None:
        track = self._track(msg.track)
        # A player counts a stall when it ends, so the report that first shows it was taken after playback resumed:
        # where and when the listener ran dry comes from the report before it.
        before = track.pacer.last_report
        track.pacer.on_report(msg.played_pts, msg.buffered_samples)
        events = msg.underruns.get("events", track.underrun_events)
        samples = msg.underruns.get("samples", track.underrun_samples)
        new_events = events - track.underrun_events
        new_samples = max(0, samples - track.underrun_samples)
        track.underrun_events, track.underrun_samples = max(events, track.underrun_events), max(
            samples, track.underrun_samples)
        if new_events > 0:
            self._attribute_stalls(track, msg, before, new_events, new_samples)
        track.wake.set()

    # ---- cancel ---------------------------------------------------------------------------------------------

    def _cancel(self, context: Context, played_pts: int | None) -> None:
        track = self.tracks[context.track]
        dropped = context.ready_samples + context.encoder.pending_samples
        visible = context.started
        if played_pts is None and context.started:
            played_pts = min(track.pacer.estimated_played(), context.end_pts)
        if context.started:
            # Frames still queued in the writer are withdrawn, so the timeline stays contiguous.
            withdrawn, started_withdrawn = self.writer.withdraw(context)
            if track.inflight is not None and track.inflight.owner is context:
                withdrawn += track.inflight.header.samples  # the sender is waiting to queue it; it never will
            dropped += withdrawn
            context.sent_samples -= withdrawn
            track.pts -= withdrawn
            track.pacer.sent_pts -= withdrawn
            track.pacer.on_cancel()  # the client drops what it buffered of this context
            track.log.rewind(track.pts)
            visible = not started_withdrawn
        self._stop(context, ContextState.CANCELLED, outcome="cancelled")
        cancel_pts = context.end_pts if visible else None
        self.writer.put_urgent({"type": "context.cancelled", "context_id": context.context_id, "ctx": context.ctx,
                                "cancel_pts": cancel_pts, "played_pts": played_pts, "dropped_samples": dropped})

    def _stop(self, context: Context, state: ContextState, outcome: str) -> None:
        context.state = state
        context.drop_ready()
        if context.producer is not None:
            context.producer.cancel()
        track = self.tracks.get(context.track)
        if track is not None:
            if context in track.queue:
                track.queue.remove(context)
            track.wake.set()
        self.metrics.contexts_active.dec()
        self.metrics.contexts_total.labels(outcome).inc()

    # ---- tracks: pacing and sending -------------------------------------------------------------------------

    def _track(self, number: int) -> Track:
        track = self.tracks.get(number)
        if track is None:
            p = self._pacing
            pacer = Pacer(p["mode"], self.fmt.sample_rate, p["target_buffer_ms"], p["max_buffer_ms"],
                          p["feedback_interval_ms"])
            track = self.tracks[number] = Track(number, pacer)
            track.sender = self._spawn(self._send_track(track))
        return track

    async def _send_track(self, track: Track) -> None:
        while True:
            track.wake.clear()
            context = track.queue[0] if track.queue else None
            if context is None:
                await track.wake.wait()
                continue
            if not context.started:
                context.started, context.start_pts = True, track.pts
                track.played.append(context)
                self.writer.put_event({"type": "context.started", "context_id": context.context_id,
                                       "ctx": context.ctx, "track": track.number, "start_pts": context.start_pts},
                                      context)
            if context.frames and isinstance(context.frames[0], FlushMark):
                mark = context.pop()
                assert isinstance(mark, FlushMark)
                self.writer.put_event({"type": "flushed", "context_id": context.context_id,
                                       "flush_id": mark.flush_id, "end_pts": context.end_pts}, context)
                continue
            if context.frames:
                allowance = track.pacer.allowance()
                if allowance is not None and allowance <= 0:
                    # A timer sets the event rather than asyncio.wait_for, which on 3.11 can swallow a cancel.
                    timer = asyncio.get_running_loop().call_later(track.pacer.seconds_until_allowed(1),
                                                                  track.wake.set)
                    try:
                        await track.wake.wait()
                    finally:
                        timer.cancel()
                    continue
                await self._send_frame(track, context)
                continue
            if context.produced_all:
                self._finish(track, context)
                continue
            await track.wake.wait()

    async def _send_frame(self, track: Track, context: Context) -> None:
        ready = context.pop()
        assert isinstance(ready, ReadyFrame)
        frame = ready.frame
        flags = 0
        if context.sent_samples == 0:
            flags |= FLAG_FIRST | (FLAG_CODEC_RESET if self.fmt.codec == "opus" else 0)
        if context.produced_all and not any(isinstance(f, ReadyFrame) for f in context.frames):
            flags |= FLAG_LAST
        header = FrameHeader(self.fmt.codec_id, flags, context.ctx, 0, track.number, frame.samples, track.pts)
        out = OutFrame(context, header, frame.payload)
        # Count the frame before the await: a cancel during the await withdraws it and rewinds these counters.
        track.pts += frame.samples
        context.sent_samples += frame.samples
        track.pacer.on_sent(frame.samples)
        track.log.record(FrameRecord(header.pts, frame.samples, ready.ready_at, time.monotonic()))
        track.inflight = out
        try:
            await self.writer.put_frame(out)  # False (not queued) if a cancel came meanwhile: it was rewound
        finally:
            track.inflight = None

    def _finish(self, track: Track, context: Context) -> None:
        track.queue.popleft()
        context.state = ContextState.DONE
        self.metrics.contexts_active.dec()
        self.metrics.contexts_total.labels("done" if not context.failed_segments else "failed").inc()
        audio_ms = round(context.sent_samples * 1000 / self.fmt.sample_rate, 3)

        def done() -> dict[str, Any]:
            first = context.first_audio_ms()
            if first is not None:
                self.metrics.first_audio.labels("ws").observe(first / 1000)
            self.metrics.audio_seconds.labels("ws").inc(audio_ms / 1000)
            return {"type": "context.done", "context_id": context.context_id, "ctx": context.ctx,
                    "end_pts": context.end_pts, "usage": {"chars": context.chars, "audio_ms": audio_ms},
                    "timing": {"first_audio_ms": first}, "stalls": context.stalls.to_json()}

        self.writer.put_event(done)

    def on_frame_written(self, frame: OutFrame, written_at: float) -> None:
        context: Context = frame.owner
        if context.first_written_at is None:
            context.first_written_at = written_at
        self.metrics.bytes_out.labels("ws").inc(len(frame.payload) + 24)

    # ---- stalls ---------------------------------------------------------------------------------------------

    def _attribute_stalls(self, track: Track, msg: Playback, before: PlaybackReport | None, new_events: int,
                          new_samples: int) -> None:
        per_event_ms = new_samples * 1000 / self.fmt.sample_rate / new_events
        context, pts, cause = track.find_stall(msg, before, new_samples, self.fmt.sample_rate)
        if cause in ("pacing", "network"):
            track.pacer.grow_target()
        for _ in range(new_events):
            if context is not None:
                context.stalls.add(per_event_ms, cause)
            self.metrics.stall_events.labels(cause).inc()
            self.metrics.stall_seconds.labels(cause).observe(per_event_ms / 1000)
            self.writer.put_urgent({"type": "stall", "context_id": context.context_id if context else None,
                                    "track": track.number, "pts": pts, "duration_ms": round(per_event_ms, 3),
                                    "cause": cause})

    async def _send_metrics(self) -> None:
        while True:
            await asyncio.sleep(self.metrics_interval_ms / 1000)
            for track in self.tracks.values():
                self.writer.put_urgent({
                    "type": "metrics", "track": track.number,
                    "buffer_ms": round(track.pacer.buffered() * 1000 / self.fmt.sample_rate, 1),
                    "target_ms": track.pacer.target_ms,
                    "underruns": {"events": track.underrun_events,
                                  "by_cause": track.stall_causes()},
                })


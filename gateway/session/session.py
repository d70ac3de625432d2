"""One Session per WebSocket: the messages, contexts and their lifecycle, cancel, and what is counted.

Threading model: everything runs on the event loop. The reader (endpoint.py) calls `handle()` for each message;
handlers are synchronous, so a cancel takes effect between two awaits of every other task. Producer tasks (one
per context) synthesize; each `Track` (one per track number) owns its timeline and paces frames into the writer.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

from voxgate.engine.base import SAMPLE_RATE, Engine
from voxgate.gateway.audio.frames import AudioFormat, make_encoder
from voxgate.gateway.config import GatewayConfig
from voxgate.gateway.metrics import GatewayMetrics
from voxgate.gateway.protocol import (
    PROTOCOL,
    Clear,
    ContextCancel,
    ContextEnd,
    ContextFlush,
    ContextOpen,
    Message,
    Ping,
    Playback,
    ProtocolError,
    SessionStart,
    TextAppend,
    invalid,
)
from voxgate.gateway.transport.loop_lag import LagHistory
from voxgate.gateway.transport.loop_turns import LoopTurns
from voxgate.gateway.transport.writer import OutFrame, SocketWriter
from voxgate.gateway.voices.openai_names import voice_aliases
from voxgate.gateway.voices.voice_rule import VoiceChoice, VoiceError, choose_voice

from .admission import Admission
from .context import MAX_AHEAD_S, Context, ContextState
from .context_text import ContextText
from .limits import check_buffered, check_flush, check_new_context, check_text
from .pacer import negotiate_pacing
from .text_split import TextSegmenter
from .track import Track
from .words import negotiate

log = logging.getLogger("voxgate.session")


class Session:
    def __init__(self, engine: Engine, config: GatewayConfig, metrics: GatewayMetrics, writer: SocketWriter,
                 turns: LoopTurns | None = None, uploaded: Callable[[], list[str]] = list,
                 admission: Admission | None = None, loop_lags: LagHistory | None = None) -> None:
        self.engine = engine
        self.loop_lags = loop_lags  # the gateway's recent event-loop lags (for the tracks' `pacing` stalls)
        self.admission = admission  # one decision for every session (admission.py); None: no admission
        self.uploaded = uploaded  # ids of the uploaded voices this session's token may use (POST /v1/voices)
        self.turns = turns
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
        self._aliases: dict[str, str] = {}  # OpenAI name -> engine voice id (fixed at session.start)
        self._pacing: dict[str, Any] = {}
        self._tasks: set[asyncio.Task] = set()
        self._bytes_out = metrics.bytes_out.labels("ws")  # label lookups once, not per frame
        self._audio_seconds = metrics.audio_seconds.labels("ws")
        self.draining = False  # shutdown: no new context (transport/drain.py)
        self._word_times = False  # session.start asked for word timestamps and the engine has them (words.py)
        self._word_times_hold = True  # session.start `timestamps_hold`: audio waits for its word times

    # ---- lifecycle ------------------------------------------------------------------------------------------

    @property
    def active_contexts(self) -> int:
        return sum(1 for c in self.contexts.values() if c.active)

    async def close(self) -> None:
        for context in list(self.contexts.values()):
            if context.active:
                self._stop(context, ContextState.CANCELLED, outcome="disconnected")
            elif not context.counted:  # finished, but its context.done (after its audio) never went out
                self._count(context, "disconnected")
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.tracks.clear()  # each holds self._finish: freed by reference counting, not left to the collector

    def begin_drain(self, grace_s: float) -> None:
        """Shutdown (transport/drain.py): tell the client, and open no new context; live ones go on until the grace
        ends."""
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
        pacing = negotiate_pacing(msg, self.config.pacing)
        self.fmt = AudioFormat.negotiate(msg.audio, pacing["mode"])
        # No voice named: none is fixed for the session, so each context's voice follows its language (the engine
        # picks: a native speaker on qwen3tts CustomVoice, espeak's voice of that language).
        self._aliases = voice_aliases(self.engine, self.config.voice_aliases)
        choice = self._choose(msg.defaults.get("voice"), msg.defaults.get("language") or None, None,
                              ("defaults.voice", "defaults.language", "defaults.instruct"), required=False)
        voice = choice.voice
        self._defaults = {"voice": voice, "language": choice.language, "instruct": msg.defaults.get("instruct")}
        self._pacing = pacing
        self.metrics_interval_ms = msg.metrics_interval_ms
        self._word_times, timestamps = negotiate(msg.timestamps, self.engine, msg.timestamps_hold)
        self._word_times_hold = timestamps.get("timestamps_hold", True)
        self.started = True
        self.writer.put_urgent({
            "type": "session.started", "session_id": self.session_id, "protocol": PROTOCOL,
            "engine": self.engine.name, "audio": self.fmt.to_json(), "pacing": pacing,
            "limits": self.limits.to_json(), "voices": [v.id for v in self.engine.voices()] + self.uploaded(),
            "aliases": self._aliases, "defaults": {"voice": voice, "language": self._defaults["language"]},
            **timestamps})
        if self.metrics_interval_ms:
            self._spawn(self._send_metrics())

    def _choose(self, voice: str | None, language: str | None, instruct: str | None, fields: tuple[str, str, str],
                required: bool, context_id: str | None = None) -> VoiceChoice:
        """The one voice rule (voices/voice_rule.py), its refusal as this context's error."""
        try:
            return choose_voice(self.engine, voice, language, instruct, uploaded=self.uploaded(),
                                aliases=self._aliases, fields=fields, required=required)
        except VoiceError as exc:
            raise ProtocolError(exc.code, exc.message, context_id=context_id, param=exc.field) from None

    def _open(self, context_id: str, opts: ContextOpen | None) -> Context:
        if self.draining:
            raise ProtocolError("shutting_down", "the server is shutting down; no new contexts", context_id=context_id)
        if context_id in self.used_ids:
            raise invalid(f"context_id {context_id!r} was already used in this session", context_id, "context_id")
        check_new_context(self.limits, context_id, self.active_contexts, len(self.used_ids))
        if self.admission is not None:  # a speaking session's new turn may use the reserve (admission.py)
            refused = self.admission.check("ws_context", priority=self.active_contexts > 0)
            if refused is not None:
                raise ProtocolError("engine_full", "the engine is full; retry this context later",
                                    context_id=context_id, retry_after_ms=refused.retry_after_ms)
        opts = opts or ContextOpen(context_id=context_id)
        instruct = opts.instruct or self._defaults["instruct"]
        choice = self._choose(opts.voice or None, opts.language or None, instruct, ("voice", "language", "instruct"),
                              self._defaults["voice"] is None, context_id)
        language = choice.language if opts.language else self._defaults["language"]
        limit = int(self.limits.max_context_audio_s * SAMPLE_RATE)
        budget = limit if opts.max_audio_ms is None else min(limit, opts.max_audio_ms * SAMPLE_RATE // 1000)
        track = self._track(opts.track)
        if opts.placement == "replace":
            for other in list(track.queue):
                self._cancel(other, None)
        context = Context(context_id, next(self._handles), opts.track, choice.voice or self._defaults["voice"],
                          language, instruct,
                          budget, opts.max_audio_ms is not None and opts.max_audio_ms * SAMPLE_RATE // 1000 < limit,
                          make_encoder(self.fmt))
        if context.instruct and not self.engine.supports_instruct:
            self._report(context, "warning", "unsupported", f"the {self.engine.name} engine ignores instruct")
        context.max_ahead_samples = int(MAX_AHEAD_S * self.fmt.sample_rate)
        context.turns = self.turns
        context.word_times = self._word_times
        context.word_times_hold = self._word_times_hold
        by_sentence = context.word_times and self.engine.word_times_by_sentence  # (engine/base.py)
        if by_sentence:  # timed sentence by sentence: a short first segment is timed sooner
            context.segmenter = TextSegmenter(first_clause_words=self.config.word_times_first_clause_words)
        if self.config.text_streaming == "auto" and self.engine.supports_text_streaming and not by_sentence:
            context.feed = ContextText(self.config.text_stream_min_words, self.config.text_stream_min_wps)
        self.used_ids.add(context_id)
        self.contexts[context_id] = context
        track.add(context)
        context.producer = self._spawn(context.produce(
            self.engine, track.wake.set, lambda kind, code, message: self._report(context, kind, code, message)))
        if self.admission is not None:  # unseen by the engine until its first stream opens, or it ends
            release = context.release_admission = self.admission.admit()
            context.producer.add_done_callback(lambda _task: release())
        # A stopped producer holds its CancelledError, whose traceback holds the context: let go of it when it ends
        context.producer.add_done_callback(context.forget_producer)
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
        check_text(self.limits, msg.context_id, msg.text)
        context = self.contexts.get(msg.context_id)
        if context is None and msg.context_id not in self.used_ids:
            context = self._open(msg.context_id, None)
        elif context is None or context.state is not ContextState.OPEN:
            raise ProtocolError("unknown_context", f"context {msg.context_id!r} has ended; open a new one",
                                context_id=msg.context_id)
        check_buffered(self.limits, msg.context_id, msg.text, context.unspoken_chars)
        context.append_text(msg.text)

    def _on_ContextFlush(self, msg: ContextFlush) -> None:
        context = self._active(msg.context_id)
        if context.state is not ContextState.OPEN:
            raise ProtocolError("unknown_context", f"context {msg.context_id!r} has ended", context_id=msg.context_id)
        check_flush(self.limits, msg.context_id, msg.flush_id, self.contexts.values())
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
        stalls = track.on_playback(msg)  # invalid_message for a report no honest player can send; O(1)
        if stalls is not None:
            self.metrics.stall_events.labels(stalls.cause).inc(stalls.events)
            self.metrics.stall_seconds.labels(stalls.cause).inc(stalls.total_ms / 1000)
            self.writer.put_urgent(stalls.to_json(track.number))

    # ---- cancel ---------------------------------------------------------------------------------------------

    def _cancel(self, context: Context, played_pts: int | None) -> None:
        track = self.tracks[context.track]
        dropped = context.ready_samples + context.encoder.pending_samples
        visible = context.started
        if played_pts is None and context.started:
            played_pts = min(track.pacer.estimated_played(), context.end_pts)
        if context.started:  # the head of its track: what the writer has not sent is taken back
            withdrawn, visible = track.withdraw(context)
            dropped += withdrawn
        self._stop(context, ContextState.CANCELLED, outcome="cancelled")
        cancel_pts = context.end_pts if visible else None
        if visible:  # the client saw it start: its frame with LAST (an empty one) comes before the ack
            self.writer.put_urgent(track.last_frame(context))
        self.writer.put_urgent({"type": "context.cancelled", "context_id": context.context_id, "ctx": context.ctx,
                                "cancel_pts": cancel_pts, "played_pts": played_pts, "dropped_samples": dropped})

    def _stop(self, context: Context, state: ContextState, outcome: str) -> None:
        context.state = state
        context.drop_ready()
        if context.feed is not None:
            context.feed.close()
        if context.producer is not None:
            context.producer.cancel()
        if context.release_admission is not None:
            context.release_admission()  # now, not a loop iteration later with its producer
        track = self.tracks.get(context.track)
        if track is not None:
            track.remove(context)
        self.metrics.contexts_active.dec()
        self._count(context, outcome)

    # ---- tracks: pacing and sending live in Track ----------------------------------------------------------

    def _track(self, number: int) -> Track:
        track = self.tracks.get(number)
        if track is None:
            track = self.tracks[number] = Track(number, self.fmt, self._pacing, self.writer, self._finish,
                                                self.loop_lags)
            self._spawn(track.run())
        return track

    def _finish(self, context: Context) -> None:
        context.state = ContextState.DONE
        self.metrics.contexts_active.dec()
        audio_ms = round(context.sent_samples * 1000 / self.fmt.sample_rate, 3)

        def done() -> dict[str, Any]:
            # Evaluated when the writer sends it, after the context's last frame: only now is it done.
            self._count(context, "done" if not context.failed_segments else "failed")
            first = context.first_audio_ms()
            if first is not None:
                self.metrics.first_audio.labels("ws").observe(first / 1000)
            self._audio_seconds.inc(audio_ms / 1000)
            return {"type": "context.done", "context_id": context.context_id, "ctx": context.ctx,
                    "end_pts": context.end_pts, "usage": {"chars": context.chars, "audio_ms": audio_ms},
                    "timing": context.timing(), "stalls": context.stalls.to_json()}

        self.writer.put_event(done)

    def _count(self, context: Context, outcome: str) -> None:
        if not context.counted:
            context.counted = True
            self.metrics.contexts_total.labels(outcome).inc()
        if not context.active:
            # Ended and counted: nothing reads it any more. A session that speaks thousands of contexts keeps only
            # their ids (used_ids), not their state: memory stays flat and the garbage collector's older
            # generations do not fill with dead contexts (a generation-1 pass over them stalled everything ~70 ms).
            self.contexts.pop(context.context_id, None)

    def on_frame_written(self, frame: OutFrame, written_at: float) -> None:
        context: Context = frame.owner
        if context.first_written_at is None and frame.samples:  # (an empty LAST frame is no audio)
            context.first_written_at = written_at
            if context.timeline is not None:
                context.timeline.stamp("write", written_at)
                self.metrics.observe_first_audio("ws", context.timeline)
        self._bytes_out.inc(len(frame.payload) + 24)

    async def _send_metrics(self) -> None:
        while True:
            await asyncio.sleep(self.metrics_interval_ms / 1000)
            for track in self.tracks.values():
                self.writer.put_urgent(track.metrics_message())


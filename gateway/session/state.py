"""What the app holds for all sessions: the engine, the config, the metrics, the session count."""

from __future__ import annotations

import asyncio
import hmac

from voxgate.engine.base import Engine
from voxgate.gateway.config import GatewayConfig
from voxgate.gateway.metrics import GatewayMetrics
from voxgate.gateway.transport.drain import Drain
from voxgate.gateway.transport.loop_lag import LagHistory
from voxgate.gateway.transport.loop_turns import LoopTurns
from voxgate.gateway.voices.store import VoiceStore, owner_of

from .admission import Admission


class GatewayState:
    def __init__(self, engine: Engine, config: GatewayConfig) -> None:
        self.engine = engine
        self.config = config
        self.metrics = GatewayMetrics(lambda: float(engine.queue_depth), lambda: engine.free_rows, config.device)
        engine.register_metrics(self.metrics.registry)
        self.sessions = 0
        self.drain = Drain(config.shutdown_grace_s)
        self.metrics.draining.set_function(lambda: float(self.drain.draining))
        self.turns = LoopTurns(config.loop_chunk_turns)  # shared by every context's producer
        self.loop_lags = LagHistory()  # the event loop's recent lags (app.py records them), for stall reports
        self.admission = Admission(config, engine, self.metrics.admission_refusals)  # one decision, every door
        # Uploaded voices (POST /v1/voices), loaded into the engine at start; None: uploads off (no voices_dir).
        self.voices = VoiceStore(config.voices_dir, engine, config.max_voices, bool(config.auth_tokens)) \
            if config.voices_dir else None
        # Uploads being handled (body, decode, prompt); one past the cap is refused, not queued
        self.voice_uploads = asyncio.Semaphore(config.max_concurrent_voice_uploads)

    def uploaded_ids(self, token: str | None) -> list[str]:
        """The uploaded voices a request with `token` may list and use (its own; every one with auth off)."""
        if self.voices is None:
            return []
        return self.voices.visible_ids(owner_of(token, bool(self.config.auth_tokens)))

    def authorized(self, token: str | None) -> bool:
        if not self.config.auth_tokens:
            return True
        if token is None:
            return False
        # Bytes, not str: compare_digest refuses non-ASCII str (a hostile token must get 401, not a crash).
        given = token.encode("utf-8", "surrogatepass")
        return any(hmac.compare_digest(given, allowed.encode("utf-8", "surrogatepass"))
                   for allowed in self.config.auth_tokens)

    def session_opened(self) -> None:
        self.sessions += 1
        self.metrics.sessions.set(self.sessions)
        self.metrics.sessions_total.inc()

    def session_closed(self) -> None:
        self.sessions -= 1
        self.metrics.sessions.set(self.sessions)

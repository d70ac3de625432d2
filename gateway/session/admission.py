"""Admission: one decision for every door a new stream comes through (a WebSocket session, a new context of an open
session, POST /v1/audio/speech, the speech WebSocket). A stream is let in only when the engine's forecast
(engine/admission.py) says it gets its first audio within `first_audio_slo_ms` and every generating stream keeps
its 1x with it (`admission_margin`); otherwise it is refused at once with `engine_full` and a Retry-After, so a
balancer or client tries elsewhere instead of everyone being late. Streams already admitted are never refused later.
`max_queued_streams` (a cap on the engine's queue) applies in both `deadline` and `queue` modes."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client import Counter
from voxgate.engine.admission import DEFAULT_END_INTERVAL_S, Forecast
from voxgate.engine.base import Engine

if TYPE_CHECKING:
    from voxgate.gateway.config import GatewayConfig

MAX_RETRY_S = 30.0


@dataclass(frozen=True, slots=True)
class Refused:
    """Why a new stream is not let in (`slots`, `realtime`, `first_audio` or `queue`) and when to ask again."""

    reason: str
    retry_after_s: float

    @property
    def retry_after_ms(self) -> int:
        return max(1, math.ceil(self.retry_after_s * 1000))

    @property
    def retry_after_header(self) -> str:
        """HTTP's Retry-After: whole seconds, at least 1."""
        return str(max(1, math.ceil(self.retry_after_s)))


def _retry(seconds: float) -> float:
    return min(MAX_RETRY_S, max(0.05, seconds))


def judge(forecast: Forecast, slo_s: float, margin: float, reserve: float) -> Refused | None:
    """The rule. `reserve`: the share of slots and of the load kept for contexts of sessions already speaking (0 for
    them). A stream alone on the engine is never refused for time or load: a refusal would help no one."""
    f, headroom = forecast, 1.0 - reserve
    if f.free_slots is not None:
        kept = math.floor(reserve * (f.total_slots or 0))
        if f.free_slots - kept < 1:
            return Refused("slots", _retry(f.end_interval_s * (kept + 1 - f.free_slots)))
    if f.streams <= 1:
        return None
    if f.load * margin > headroom:
        fitting = math.floor(f.streams * headroom / (f.load * margin))
        return Refused("realtime", _retry(f.end_interval_s * max(1, f.streams - fitting)))
    if f.first_audio_s > slo_s:
        return Refused("first_audio", _retry(f.first_audio_s - slo_s))
    return None


class Admission:
    """The decision, and the streams admitted that the engine has not seen yet (`unseen`). A context is admitted when
    it opens, but its stream reaches the engine only when its producer runs (after its text came), so the engine's
    own counts lag: a burst of new contexts would all pass before the engine counted any (one session queued 9
    streams past a limit of 2). They count ahead of the new stream, in the queue and in the forecast."""

    def __init__(self, config: GatewayConfig, engine: Engine, refusals: Counter | None = None) -> None:
        self.mode = config.admission
        self.limit = config.max_queued_streams  # 0: no queue cap
        self.slo_s = config.first_audio_slo_ms / 1000
        self.margin, self.reserve = config.admission_margin, config.admission_reserve
        self.engine = engine
        self.refusals = refusals  # voxgate_admission_refusals_total{door, reason}
        self.unseen = 0

    @property
    def queued(self) -> int:
        """Streams waiting for an engine row: the engine's queue, and the unseen ones beyond its free rows."""
        return self.engine.queue_depth + max(0, self.unseen - (self.engine.free_rows or 0))

    @property
    def rows_taken(self) -> bool:
        """No free row left for a new stream (engines without a row count: always, their queue is the measure)."""
        free = self.engine.free_rows
        return free is None or free <= self.unseen

    def forecast(self) -> Forecast | None:
        """The engine's forecast for one more stream (None: admission by deadline is off, or no opinion)."""
        return self.engine.admission_forecast(self.unseen) if self.mode == "deadline" else None

    def refusal(self, priority: bool = False) -> Refused | None:
        """Why a new stream would be refused now, or None. `priority`: a context of a session already speaking
        (it may use the reserve). No side effects: /health/load asks it too."""
        if self.mode == "off":
            return None
        if self.limit > 0 and self.rows_taken and self.queued >= self.limit:
            return Refused("queue", DEFAULT_END_INTERVAL_S)
        forecast = self.forecast()
        if forecast is None:
            return None
        return judge(forecast, self.slo_s, self.margin, 0.0 if priority else self.reserve)

    def check(self, door: str, priority: bool = False) -> Refused | None:
        """`refusal`, counted by door and reason when it refuses."""
        refused = self.refusal(priority)
        if refused is not None and self.refusals is not None:
            self.refusals.labels(door, refused.reason).inc()
        return refused

    def admit(self) -> Callable[[], None]:
        """Count one admitted stream as unseen until the returned call (idempotent): the engine has it, or it
        ended without ever reaching the engine."""
        self.unseen += 1
        counted = True

        def handed_over() -> None:
            nonlocal counted
            if counted:
                counted = False
                self.unseen -= 1

        return handed_over

"""How busy this backend is, for a load balancer: the numbers of GET /health/load, its `X-Voxgate-Load` header,
and admission: with `max_queued_streams` set, a new session, a new context of an open session and an HTTP speech
request are refused with `engine_full` when the engine is full (close 1013 / HTTP 503: retry elsewhere)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from voxgate.engine.base import Engine

if TYPE_CHECKING:
    from voxgate.gateway.config import GatewayConfig

    from .state import GatewayState

LOAD_HEADER = "X-Voxgate-Load"


class Admission:
    """The engine's queue as admission counts it, for every session of the engine together. A context is admitted
    when it opens, but its stream reaches the engine only when its producer runs (after its text came), so the
    engine's own queue lags: the contexts admitted and not yet handed to the engine (`unseen`) count too, taking
    the engine's free rows first. Without them, a burst of new contexts would all pass before the engine counted
    any (one session queued 9 streams past a limit of 2)."""

    def __init__(self, config: GatewayConfig, engine: Engine) -> None:
        self.limit = config.max_queued_streams  # 0: admission off
        self.engine = engine
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

    def full(self) -> bool:
        """No free row and `max_queued_streams` streams queued already: a new stream would only wait (0: never)."""
        return self.limit > 0 and self.rows_taken and self.queued >= self.limit

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


def engine_full(state: GatewayState) -> bool:
    return state.admission.full()


def load_fraction(state: GatewayState) -> float:
    """0 (idle) .. 1 (refusing new sessions): the fuller of the session table and, when no engine row is free,
    the queue."""
    fractions = [state.sessions / state.config.max_sessions]
    if state.config.max_queued_streams and state.admission.rows_taken:
        fractions.append(state.admission.queued / state.config.max_queued_streams)
    return min(1.0, max(fractions))


def backend_load(state: GatewayState) -> dict[str, Any]:
    """GET /health/load's body (beside `status`)."""
    config, engine = state.config, state.engine
    return {
        "load": round(load_fraction(state), 4),
        "accepting": engine.ready and not state.drain.draining and not engine_full(state)
        and state.sessions < config.max_sessions,
        "sessions": state.sessions,
        "max_sessions": config.max_sessions,
        "free_sessions": max(0, config.max_sessions - state.sessions),
        "queued_streams": state.admission.queued,
        "max_queued_streams": config.max_queued_streams or None,
        "free_rows": engine.free_rows,
        "device": config.device or None,
    }

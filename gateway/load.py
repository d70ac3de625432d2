"""How busy this backend is, for a load balancer: the numbers of GET /health/load, its `X-Voxgate-Load` header,
and the admission rule that refuses a new session when the engine is full (close 1013: retry elsewhere)."""

from __future__ import annotations

from typing import Any

from .state import GatewayState

LOAD_HEADER = "X-Voxgate-Load"


def engine_full(state: GatewayState) -> bool:
    """No free row and `max_queued_streams` streams queued already: a new session would only wait (0: never)."""
    limit = state.config.max_queued_streams
    if limit == 0:
        return False
    return state.engine.free_rows in (0, None) and state.engine.queue_depth >= limit


def load_fraction(state: GatewayState) -> float:
    """0 (idle) .. 1 (refusing new sessions): the fuller of the session table and, when the engine says, its queue."""
    fractions = [state.sessions / state.config.max_sessions]
    if state.config.max_queued_streams and state.engine.free_rows in (0, None):
        fractions.append(state.engine.queue_depth / state.config.max_queued_streams)
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
        "queued_streams": engine.queue_depth,
        "max_queued_streams": config.max_queued_streams or None,
        "free_rows": engine.free_rows,
        "device": config.device or None,
    }

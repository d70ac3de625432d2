"""How busy this backend is, for a load balancer: the numbers of GET /health/load and its `X-Voxgate-Load` header.
They follow admission (admission.py): while a new stream would be refused, `accepting` is false and `load` 1.0."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .state import GatewayState

LOAD_HEADER = "X-Voxgate-Load"


def load_fraction(state: GatewayState, count_sessions: bool = True) -> float:
    """0 (idle) .. 1 (refusing new streams): the fullest of the session table (unless not `count_sessions`), the
    queue (with max_queued_streams, when no engine row is free), and the engine's forecast (its load with one more
    stream against the headroom, and its slots in use)."""
    admission, config = state.admission, state.config
    if admission.refusal() is not None:
        return 1.0
    fractions = [state.sessions / config.max_sessions if count_sessions else 0.0]
    if admission.limit and admission.rows_taken:
        fractions.append(admission.queued / admission.limit)
    forecast = admission.forecast()
    if forecast is not None:
        fractions.append(forecast.load * admission.margin / (1.0 - admission.reserve))
        if forecast.free_slots is not None and forecast.total_slots:
            fractions.append(1.0 - forecast.free_slots / forecast.total_slots)
    return min(1.0, max(fractions))


def backend_load(state: GatewayState) -> dict[str, Any]:
    """GET /health/load's body (beside `status`)."""
    config, engine = state.config, state.engine
    return {
        "load": round(load_fraction(state), 4),
        "accepting": engine.ready and not state.drain.draining and state.admission.refusal() is None
        and state.sessions < config.max_sessions,
        "sessions": state.sessions,
        "max_sessions": config.max_sessions,
        "free_sessions": max(0, config.max_sessions - state.sessions),
        "queued_streams": state.admission.queued,
        "max_queued_streams": config.max_queued_streams or None,
        "free_rows": engine.free_rows,
        "device": config.device or None,
    }

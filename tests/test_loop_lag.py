"""transport/loop_lag.py's LagHistory: how long the loop was held within a window, against a plain reference (a
fine time grid) on fresh random lags."""

from __future__ import annotations

import random

import numpy as np
import pytest
from voxgate.gateway.transport.loop_lag import LagHistory


def held_on_a_grid(lags: list[tuple[float, float]], since: float, until: float, step: float = 1e-5) -> float:
    """The reference: the grid points inside [since, until] that some lag's interval [end - lag, end] covers."""
    t = np.arange(since, until, step) + step / 2
    covered = np.zeros_like(t, dtype=bool)
    for end, lag in lags:
        covered |= (t >= end - lag) & (t < end)
    return float(covered.sum() * step)


@pytest.mark.parametrize("seed", range(5))
def test_held_time_matches_the_reference(seed: int) -> None:
    rng = random.Random(seed)
    now = [100.0]
    history = LagHistory(clock=lambda: now[0])
    lags = []
    for _ in range(60):  # a 10 ms tick's lags: one ends, the next tick starts after it (they never overlap)
        now[0] += 0.01 + rng.expovariate(1 / 0.05)
        lag = rng.choice([0.0, 0.0005, rng.uniform(0.001, 0.3)])
        now[0] += lag
        history.add(lag)
        if lag >= LagHistory.MIN_S:
            lags.append((now[0], lag))
    for _ in range(20):
        since = rng.uniform(100.0, now[0])
        until = since + rng.uniform(0.0, 2.0)
        assert history.held_s(since, until) == pytest.approx(held_on_a_grid(lags, since, until), abs=1e-4)


def test_it_keeps_the_last_lags_only() -> None:
    now = [0.0]
    history = LagHistory(maxlen=2, clock=lambda: now[0])
    for _ in range(3):
        now[0] += 1.0
        history.add(0.5)
    assert history.held_s(0.0, 10.0) == pytest.approx(1.0)  # the first lag (0.5 .. 1.0) is forgotten


def test_a_query_looks_at_the_newest_lags_only() -> None:
    """A playback report asks for it: its work is bounded whatever window the report implies."""
    now = [0.0]
    history = LagHistory(clock=lambda: now[0])
    for _ in range(1000):
        now[0] += 0.02
        history.add(0.01)
    assert history.held_s(0.0, now[0]) == pytest.approx(256 * 0.01)
    assert history.held_s(0.0, now[0], max_scan=10) == pytest.approx(10 * 0.01)

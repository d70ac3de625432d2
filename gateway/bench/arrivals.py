"""Open-loop arrival schedules: Poisson arrivals (exponential gaps) at a rate, reproducible from a seed."""

from __future__ import annotations

import numpy as np


def poisson_arrivals(rate: float, duration_s: float, seed: int) -> list[float]:
    """Arrival times in [0, duration_s) for a Poisson process of `rate` per second."""
    if rate <= 0 or duration_s <= 0:
        raise ValueError("rate and duration must be positive")
    rng = np.random.default_rng(seed)
    times: list[float] = []
    t = 0.0
    # draw gaps in blocks: the expected count is rate * duration; a few blocks cover any realistic tail
    while True:
        gaps = rng.exponential(1.0 / rate, size=max(16, int(rate * duration_s * 0.5) + 16))
        for gap in gaps:
            t += float(gap)
            if t >= duration_s:
                return times
            times.append(t)

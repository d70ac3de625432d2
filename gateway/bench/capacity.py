"""SLO capacity: the highest arrival rate at which at least 90 % of requests are in SLO.

The search is pure (it calls `measure(rate) -> share in SLO`), so it is tested without a server. With a rate list it
measures every rate; with `start`/`max` it doubles until a rate fails, then bisects between the last pass and the
first failure `refine` times.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

SLO_TTFA_S = 0.200
SLO_TOTAL_PAUSE_S = 0.010
SLO_SHARE = 0.90


def in_slo(ttfa_s: float | None, total_pause_s: float, ok: bool = True) -> bool:
    """A request is in SLO when it succeeded, its first audio came within 200 ms and it paused under 10 ms."""
    return ok and ttfa_s is not None and ttfa_s <= SLO_TTFA_S and total_pause_s < SLO_TOTAL_PAUSE_S


@dataclass(slots=True)
class Search:
    """Measured shares by rate, in measuring order, and the capacity they imply."""

    shares: dict[float, float] = field(default_factory=dict)
    threshold: float = SLO_SHARE

    @property
    def capacity(self) -> float | None:
        passing = [r for r, s in self.shares.items() if s >= self.threshold]
        return max(passing, default=None)


def search_rates(measure: Callable[[float], float], rates: Sequence[float], threshold: float = SLO_SHARE) -> Search:
    """Measure every rate in `rates` (ascending); capacity is the highest that passes."""
    result = Search(threshold=threshold)
    for rate in sorted(rates):
        result.shares[rate] = measure(rate)
    return result


def search_doubling(
    measure: Callable[[float], float],
    start: float,
    max_rate: float,
    refine: int = 2,
    threshold: float = SLO_SHARE,
) -> Search:
    """Double from `start` until a rate fails (or `max_rate` passes), then bisect `refine` times."""
    if start <= 0 or max_rate < start:
        raise ValueError("need 0 < start <= max_rate")
    result = Search(threshold=threshold)
    good: float | None = None
    bad: float | None = None
    rate = start
    while True:
        share = result.shares[rate] = measure(rate)
        if share >= threshold:
            good = rate
            if rate >= max_rate:
                return result
            rate = min(rate * 2, max_rate)
        else:
            bad = rate
            break
    low = good if good is not None else 0.0
    for _ in range(refine):
        mid = round((low + bad) / 2, 3)
        if mid <= low or mid >= bad or mid <= 0:
            break
        share = result.shares[mid] = measure(mid)
        if share >= threshold:
            low = mid
        else:
            bad = mid
    return result

"""SLO capacity: the highest arrival rate at which at least 90 % of requests are in SLO.

A search plan is a pure generator (it yields a rate, receives that rate's share in SLO), so it is tested without a
server and driven by the async runner without threads. With a rate list it measures every rate; with `start`/`max`
it doubles until a rate fails, then bisects between the last pass and the first failure `refine` times.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
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


Plan = Generator[float, float, None]  # yields the next rate to measure, receives its share in SLO


def rates_plan(rates: Sequence[float]) -> Plan:
    """Every rate in `rates`, ascending."""
    for rate in sorted(rates):  # noqa: UP028 (`yield from` a list iterator cannot receive `send`)
        yield rate


def doubling_plan(start: float, max_rate: float, refine: int = 2, threshold: float = SLO_SHARE) -> Plan:
    """Double from `start` until a rate fails (or `max_rate` passes), then bisect `refine` times."""
    if start <= 0 or max_rate < start:
        raise ValueError("need 0 < start <= max_rate")
    good: float | None = None
    rate = start
    while True:
        share = yield rate
        if share < threshold:
            bad = rate
            break
        good = rate
        if rate >= max_rate:
            return
        rate = min(rate * 2, max_rate)
    low = good if good is not None else 0.0
    for _ in range(refine):
        mid = round((low + bad) / 2, 3)
        if mid <= low or mid >= bad:
            return
        share = yield mid
        if share >= threshold:
            low = mid
        else:
            bad = mid


def drive(plan: Plan, measure: Callable[[float], float], threshold: float = SLO_SHARE) -> Search:
    """Run a plan with a synchronous `measure`; the async runner drives plans the same way with `await`."""
    result = Search(threshold=threshold)
    try:
        rate = next(plan)
        while True:
            result.shares[rate] = measure(rate)
            rate = plan.send(result.shares[rate])
    except StopIteration:
        return result


def search_rates(measure: Callable[[float], float], rates: Sequence[float], threshold: float = SLO_SHARE) -> Search:
    return drive(rates_plan(rates), measure, threshold)


def search_doubling(
    measure: Callable[[float], float], start: float, max_rate: float, refine: int = 2, threshold: float = SLO_SHARE
) -> Search:
    return drive(doubling_plan(start, max_rate, refine, threshold), measure, threshold)

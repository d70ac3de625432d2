"""The gateway's own event-loop lag: how late a periodic timer runs. Every frame of every session waits behind
whatever holds the loop, so this is the server-side number a benchmark checks (p99 < 5 ms)."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import deque
from collections.abc import Callable

INTERVAL_S = 0.01


async def watch_loop_lag(observe: Callable[[float], None], interval_s: float = INTERVAL_S) -> None:
    loop = asyncio.get_running_loop()
    while True:
        t = loop.time()
        await asyncio.sleep(interval_s)
        observe(max(0.0, loop.time() - t - interval_s))


class LagHistory:
    """The recent lags of 1 ms or more, each as the interval the loop was held, so that a stall can be checked
    against the gateway's own lag at its time: a frame sent late while the process was starved of CPU is not the
    pacer's decision. Bounded: the last `maxlen` lags (at one a 10 ms tick at worst, over 40 s)."""

    MIN_S = 0.001

    def __init__(self, maxlen: int = 4096, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._ends: deque[float] = deque(maxlen=maxlen)
        self._lags: deque[float] = deque(maxlen=maxlen)

    def add(self, lag_s: float) -> None:
        """A lag that has just ended."""
        if lag_s >= self.MIN_S:
            self._ends.append(self.clock())
            self._lags.append(lag_s)

    def held_s(self, since: float, until: float, max_scan: int = 256) -> float:
        """How long within [since, until] (this clock) the loop was held by the lags recorded, looking at the
        newest `max_scan` of them at most: a client's playback report asks this, and its cost must not grow with
        what the report claims (a stall long ago, or hours long, costs no more than a recent one)."""
        held = 0.0
        for end, lag in itertools.islice(zip(reversed(self._ends), reversed(self._lags), strict=True), max_scan):
            if end <= since:
                break  # ends only grow: every older lag ended before the window too
            held += max(0.0, min(end, until) - max(end - lag, since))
        return held

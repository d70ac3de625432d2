"""A bound on how many engine chunks one event-loop iteration takes in, so the loop comes round every few ms even
when the gateway is the saturated part.

asyncio runs, per iteration, every callback that became ready during the previous one. With 128 busy sessions
that is every session's next step at once (~160 callbacks, ~20 ms on one core): a timer, a cancel or a ping waits
that long. Here a context's producer takes a turn before it encodes and queues a chunk; at most `per_iteration`
turns are given per iteration and the rest wait in arrival order. The loop does the same work (no throughput is
lost while there is a backlog: every iteration gives all its turns), but in short iterations, between which
timers and control messages run. With headroom the turns are never all taken and nothing waits.
"""

from __future__ import annotations

import asyncio
from collections import deque


class LoopTurns:
    def __init__(self, per_iteration: int) -> None:
        self.per_iteration = per_iteration  # 0: no bound
        self._given = 0  # turns given since the current round began
        self._round_pending = False  # a `_next_round` callback is scheduled
        self._waiting: deque[asyncio.Future[None]] = deque()

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def take(self) -> asyncio.Future[None] | None:
        """None: go ahead now. Else a future to await: it is done when this caller's turn comes (first come,
        first served). A caller cancelled while waiting gives its place up."""
        if not self.per_iteration:
            return None
        if self._given < self.per_iteration and not self._waiting:
            self._given += 1
            self._schedule_round()
            return None
        waiter = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        self._schedule_round()
        return waiter

    def _schedule_round(self) -> None:
        # call_soon from inside an iteration runs in the next one: a round is one iteration.
        if not self._round_pending:
            self._round_pending = True
            asyncio.get_running_loop().call_soon(self._next_round)

    def _next_round(self) -> None:
        self._round_pending = False
        self._given = 0
        while self._waiting and self._given < self.per_iteration:
            waiter = self._waiting.popleft()
            if not waiter.done():  # (cancelled while waiting)
                waiter.set_result(None)
                self._given += 1
        if self._given:
            self._schedule_round()

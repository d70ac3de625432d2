"""The gateway's own event-loop lag: how late a periodic timer runs. Every frame of every session waits behind
whatever holds the loop, so this is the server-side number a benchmark checks (p99 < 5 ms)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

INTERVAL_S = 0.01


async def watch_loop_lag(observe: Callable[[float], None], interval_s: float = INTERVAL_S) -> None:
    loop = asyncio.get_running_loop()
    while True:
        t = loop.time()
        await asyncio.sleep(interval_s)
        observe(max(0.0, loop.time() - t - interval_s))

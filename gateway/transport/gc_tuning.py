"""Python's garbage collector, kept out of the pause budget (ARCHITECTURE.md, "GC").

After start-up (engine loaded and warm) everything alive is frozen into the permanent generation, so no pass ever
walks the model and the app again. Then, by `gc_collect`:

- `idle` (the default): no automatic pass at all. The request path makes no reference cycle (tests/reliability/
  test_gc_cycles.py, tests/qwen3tts/test_gc_cycles.py): a session, a context, an engine stream and an HTTP request
  are freed by reference counting as they end, so under load there is nothing for a pass to find, and a pass would
  only walk every live stream's objects, holding the event loop and the engine loop meanwhile (20-80 ms at 2x
  capacity on the H200). A full pass runs once nothing is speaking (no WebSocket context, no HTTP stream), where it
  walks only what is left (a few milliseconds), to free what rarer paths may have left in cycles. If the tracked
  objects made since the last pass still grow past `gc_busy_limit` while busy (a cycle on a busy path, or a load
  that never pauses), a pass runs anyway and says so in the log.
- `auto`: CPython's own passes, gen-0 every `gc_gen0_threshold` young objects (the behaviour before `idle`).

Every pass is measured, with the number of objects it freed.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Callable

log = logging.getLogger("voxgate.gc")

IDLE_CHECK_S = 0.05  # how often the idle collector looks (a cheap check: two counters)
IDLE_MIN_OBJECTS = 1_000  # fewer tracked objects made since the last pass: nothing worth a pass
BUSY_WARN_EVERY_S = 60.0


class GcTuning:
    def __init__(self, gen0_threshold: int, freeze: bool, observe: Callable[[int, float, int], None],
                 collect: str = "auto", busy_limit: int = 500_000, busy: Callable[[], bool] = lambda: False) -> None:
        if collect not in ("idle", "auto"):
            raise ValueError("gc_collect must be idle or auto")
        self.gen0_threshold = gen0_threshold
        self.freeze = freeze
        self.observe = observe  # (generation, seconds, objects collected) for every collection
        self.collect = collect
        self.busy_limit = busy_limit
        self.busy = busy  # True while anything is speaking
        self.busy_passes = 0  # passes forced by busy_limit
        self._saved = gc.get_threshold()
        self._was_enabled = gc.isenabled()
        self._started_at = 0.0
        self._warned_at = -BUSY_WARN_EVERY_S
        self._task: asyncio.Task | None = None

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started_at = time.perf_counter()
        else:
            self.observe(info["generation"], time.perf_counter() - self._started_at, info["collected"])

    def apply(self) -> None:
        """On the event loop, once the engine is warm."""
        if self.freeze:
            gc.collect()
            gc.freeze()
        gc.set_threshold(self.gen0_threshold, *self._saved[1:])
        gc.callbacks.append(self._callback)
        if self.collect == "idle":
            gc.disable()
            self._task = asyncio.get_running_loop().create_task(self._collect_when_idle())

    def undo(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)
        gc.set_threshold(*self._saved)
        if self._was_enabled:
            gc.enable()
        if self.freeze:
            gc.unfreeze()

    def due(self) -> str | None:
        """Whether a pass should run now: "idle", "busy" (past the limit) or None."""
        made = gc.get_count()[0]  # tracked objects allocated minus those freed since the last pass (floored at 0)
        if made >= self.busy_limit:
            return "busy" if self.busy() else "idle"
        if made >= IDLE_MIN_OBJECTS and not self.busy():
            return "idle"
        return None

    def collect_now(self, why: str) -> None:
        made = gc.get_count()[0]
        gc.collect()
        if why == "busy":
            self.busy_passes += 1
            now = time.monotonic()
            if now - self._warned_at >= BUSY_WARN_EVERY_S:
                self._warned_at = now
                log.warning("garbage collection while streams were speaking: %d objects made since the last pass "
                            "(gc_busy_limit %d); a reference cycle on a busy path, or a load that never pauses",
                            made, self.busy_limit)

    async def _collect_when_idle(self) -> None:
        while True:
            await asyncio.sleep(IDLE_CHECK_S)
            why = self.due()
            if why is not None:
                self.collect_now(why)

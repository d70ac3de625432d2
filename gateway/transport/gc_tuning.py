"""Python's garbage collector, tuned so that it never eats the pause budget (ARCHITECTURE.md, "GC").

After start-up (engine loaded and warm) everything alive is frozen into the permanent generation, so full
collections stop traversing the model and the app, and the gen-0 threshold is raised so the many short-lived
objects of a busy event loop are collected in fewer, cheaper passes. Every collection's pause is measured, with the
number of objects it freed (a long pass that frees few objects points at finalizers, not at garbage volume).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable


class GcTuning:
    def __init__(self, gen0_threshold: int, freeze: bool, observe: Callable[[int, float, int], None]) -> None:
        self.gen0_threshold = gen0_threshold
        self.freeze = freeze
        self.observe = observe  # (generation, seconds, objects collected) for every collection
        self._saved = gc.get_threshold()
        self._started_at = 0.0

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started_at = time.perf_counter()
        else:
            self.observe(info["generation"], time.perf_counter() - self._started_at, info["collected"])

    def apply(self) -> None:
        if self.freeze:
            gc.collect()
            gc.freeze()
        gc.set_threshold(self.gen0_threshold, *self._saved[1:])
        gc.callbacks.append(self._callback)

    def undo(self) -> None:
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)
        gc.set_threshold(*self._saved)
        if self.freeze:
            gc.unfreeze()

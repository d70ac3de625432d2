"""The garbage collector's settings (gateway/transport/gc_tuning.py): with gc_collect = "idle" no automatic pass
runs; a full pass frees cycles once nothing is speaking, or while busy once gc_busy_limit objects were made since the
last pass (and says so); `undo` restores the process's settings."""

from __future__ import annotations

import gc
import logging
import weakref

import pytest
from support import until
from voxgate.gateway.transport.gc_tuning import IDLE_MIN_OBJECTS, GcTuning


class Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only a collector pass frees it


def cycles(n: int) -> weakref.ref:
    """n cyclic objects dropped at once; a weak reference to the first."""
    nodes = [Node() for _ in range(n)]
    first = weakref.ref(nodes[0])
    del nodes
    return first


@pytest.fixture
def restore_gc():
    enabled, threshold = gc.isenabled(), gc.get_threshold()
    yield
    gc.set_threshold(*threshold)
    gc.enable() if enabled else gc.disable()


async def test_idle_collection_waits_for_the_streams_to_end(restore_gc) -> None:
    busy = [True]
    passes: list[tuple[int, int]] = []
    tuning = GcTuning(5_000, True, lambda gen, s, n: passes.append((gen, n)), "idle", 10**9, lambda: busy[0])
    tuning.apply()
    try:
        assert not gc.isenabled()
        kept = cycles(IDLE_MIN_OBJECTS * 3)
        assert tuning.due() is None  # speaking: no pass, however much was made
        assert kept() is not None and passes == []
        busy[0] = False
        assert tuning.due() == "idle"
        await until(lambda: kept() is None, 10, "the idle pass")
        assert passes and passes[-1][0] == 2 and tuning.busy_passes == 0
    finally:
        tuning.undo()
    assert gc.isenabled() and gc.get_freeze_count() == 0


async def test_a_busy_pass_past_the_limit_is_logged(restore_gc, caplog) -> None:
    tuning = GcTuning(5_000, False, lambda gen, s, n: None, "idle", 20_000, lambda: True)
    tuning.apply()
    try:
        with caplog.at_level(logging.WARNING, "voxgate.gc"):
            kept = cycles(30_000)
            await until(lambda: kept() is None, 10, "the pass past gc_busy_limit")
        assert tuning.busy_passes == 1
        assert "garbage collection while streams were speaking" in caplog.text
    finally:
        tuning.undo()


def test_auto_keeps_cpythons_passes(restore_gc) -> None:
    tuning = GcTuning(7_000, False, lambda gen, s, n: None, "auto")
    tuning.apply()
    try:
        assert gc.isenabled() and gc.get_threshold()[0] == 7_000
    finally:
        tuning.undo()
    with pytest.raises(ValueError, match="idle or auto"):
        GcTuning(7_000, False, lambda gen, s, n: None, "never")

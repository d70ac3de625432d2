"""SlotPool: allocation invariants, the sink slot, one-launch reset, and refusals that never hang."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from voxgate.engine.slot_pool import SINK, NoUsableSlot, PoolFull, SlotPool, SlotSpec, slot_bytes

LAYOUT = {
    "count": SlotSpec((1,), torch.int64),
    "kv": SlotSpec((2, 3, 5), torch.bfloat16),  # 30 values = 60 B: exercises the 64 B alignment padding
    "conv": SlotSpec((4, 6), torch.float32),
}


def test_views_have_shape_dtype_and_own_bytes() -> None:
    pool = SlotPool(LAYOUT, 4)
    assert pool.slot_bytes == slot_bytes(LAYOUT) == 64 + 64 + 128
    for name, spec in LAYOUT.items():
        assert pool[name].shape == (4, *spec.shape) and pool[name].dtype == spec.dtype
    pool["conv"][2] = 1.5
    pool["kv"][2] = 2.0
    pool["count"][2] = 7
    assert (pool["conv"][[0, 1, 3]] == 0).all() and (pool["kv"][[0, 1, 3]] == 0).all()
    assert (pool["count"][[0, 1, 3]] == 0).all()
    assert pool["count"][2].item() == 7 and (pool["conv"][2] == 1.5).all() and (pool["kv"][2] == 2).all()


def test_gather_reads_copies_of_slots() -> None:
    pool = SlotPool(LAYOUT, 4)
    for slot in range(4):
        for name in LAYOUT:
            pool[name][slot] = slot + 1
    got = pool.gather(torch.tensor([2, 0, 2]))
    for name, spec in LAYOUT.items():
        assert got[name].shape == (3, *spec.shape) and got[name].dtype == spec.dtype
        assert got[name][0].eq(3).all() and got[name][1].eq(1).all() and got[name][2].eq(3).all()
    got["conv"][0] = -1
    assert pool["conv"][2].eq(3).all()  # a copy, not a view of the pool


def test_allocate_free_and_sink() -> None:
    pool = SlotPool(LAYOUT, 3)
    assert pool.max_streams == 2 and pool.can_allocate(2) and not pool.can_allocate(3)
    a, b = pool.allocate(), pool.allocate()
    assert {a, b} == {1, 2} and SINK not in (a, b)
    assert not pool.can_allocate()
    with pytest.raises(PoolFull, match="check can_allocate"):
        pool.allocate()
    pool.free(a)
    assert pool.can_allocate() and pool.num_free == 1
    with pytest.raises(ValueError, match="not allocated"):
        pool.free(a)
    with pytest.raises(ValueError, match="sink: True"):
        pool.free(SINK)


def test_reused_slot_is_zeroed_in_one_launch_for_every_dtype() -> None:
    pool = SlotPool(LAYOUT, 2)
    slot = pool.allocate()
    for name in LAYOUT:
        pool[name][slot] = 3
    pool["conv"][SINK] = 9  # garbage in the sink stays garbage: nobody reads it as a stream
    pool.free(slot)
    assert (pool["conv"][slot] == 3).all()  # free() does not touch the contents...
    again = pool.allocate()
    assert again == slot
    for name in LAYOUT:  # ...allocate() resets them
        assert (pool[name][slot] == 0).all(), name
    pool.reset([SINK])
    assert (pool.data == 0).all()


@pytest.mark.parametrize("num_slots", [-1, 0, 1])
def test_no_usable_slot_is_refused_at_construction(num_slots: int) -> None:
    with pytest.raises(NoUsableSlot, match="leaves no usable slot"):
        SlotPool(LAYOUT, num_slots)


def test_from_budget() -> None:
    per = slot_bytes(LAYOUT)
    assert SlotPool.from_budget(LAYOUT, 10 * per + per - 1).num_slots == 10
    assert SlotPool.from_budget(LAYOUT, 100 * per, max_slots=5).num_slots == 5
    with pytest.raises(NoUsableSlot, match="holds 1 slots"):
        SlotPool.from_budget(LAYOUT, 2 * per - 1)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=9), max_size=60))
def test_invariants_under_random_allocate_free(ops: list[int]) -> None:
    pool = SlotPool(LAYOUT, 5)
    live: list[int] = []
    for op in ops:
        if op < 6 and pool.can_allocate():
            live.append(pool.allocate())
        elif live:
            pool.free(live.pop(op % len(live)))
        assert len(set(live)) == len(live) and SINK not in live
        assert set(live) == pool.used_slots
        assert pool.num_free + len(live) == pool.max_streams


def test_gather_rows_update_in_place_and_scatter_rows() -> None:
    """A step's round trip: read rows once, update their named views in place, write them back once."""
    pool = SlotPool(LAYOUT, 4)
    for slot in range(4):
        for name in LAYOUT:
            pool[name][slot] = slot + 1
    slots = torch.tensor([3, 0, 1, 0])  # sink rows may repeat
    rows = pool.gather_rows(slots)
    assert rows.shape == (4, pool.slot_bytes) and rows.dtype == torch.uint8
    views = pool.views_of(rows)
    assert views["conv"][0].eq(4).all() and views["kv"][2].eq(2).all() and views["count"][1].eq(1).all()
    views["conv"][0] = -2.5
    views["count"].add_(10)
    assert pool["conv"][3].eq(4).all()  # a copy until scattered
    pool.scatter_rows(slots, rows)
    assert pool["conv"][3].eq(-2.5).all() and pool["count"][3].item() == 14 and pool["count"][1].item() == 12
    assert pool["kv"][3].eq(4).all() and pool["kv"][1].eq(2).all()
    assert pool["conv"][2].eq(3).all() and pool["count"][2].item() == 3  # slots not in the step are untouched

"""engine/aligner/windows.py: windows packed into rows (first fit, largest first), each frame in one slot, and the
mask that keeps every frame inside its own window."""

from __future__ import annotations

import random

import pytest
import torch
from voxgate.engine.aligner.windows import PADDING, WindowLayout, pack


def test_pack_fills_rows_first_fit_largest_first():
    assert pack([7, 46, 26, 52, 13], 52) == [[3], [1], [0, 2, 4]]  # 26 + 13 + 7 share a row
    assert pack([52], 52) == [[0]]
    with pytest.raises(ValueError, match=r"1\.\.52 frames"):
        pack([53], 52)


@pytest.mark.parametrize("seed", range(5))
def test_every_frame_has_one_slot_and_sees_exactly_its_own_window(seed):
    rng = random.Random(seed)
    capacity = rng.choice([13, 26, 52, 104])
    windows = [rng.randint(1, capacity) for _ in range(rng.randint(1, 30))]
    layout = WindowLayout.build(windows, capacity, rows=len(pack(windows, capacity)) + 2)
    assert sum(map(len, pack(windows, capacity))) == len(windows)
    assert layout.rows * capacity >= sum(windows)
    slots = layout.slot_of_frame
    assert len(slots) == sum(windows) == len(set(slots))  # one slot a frame, none shared
    owner = [i for i, w in enumerate(windows) for _ in range(w)]
    flat = layout.window_of_slot.view(-1)
    assert [int(flat[s]) for s in slots] == owner
    assert int((flat == PADDING).sum()) == layout.rows * capacity - sum(windows)
    mask = layout.mask().view(layout.rows * capacity, capacity)
    for f, s in enumerate(slots):  # a frame's keys: its window's frames, in its row
        row = s // capacity
        seen = {row * capacity + c for c in torch.nonzero(mask[s]).view(-1).tolist()}
        assert seen == {t for t, o in zip(slots, owner, strict=True) if o == owner[f]}
    for s in torch.nonzero(flat == PADDING).view(-1).tolist():  # padding sees itself only
        assert torch.nonzero(mask[s]).view(-1).tolist() == [s % capacity]
    src = layout.sources(torch.arange(100, 100 + sum(windows)), zero=-5)
    assert [int(src[s]) for s in slots] == list(range(100, 100 + sum(windows)))
    assert int((src == -5).sum()) == layout.rows * capacity - sum(windows)


def test_packed_rows_are_about_the_frames_not_the_windows():
    """Clips of 0.5-3.5 s (7-46 frames, one window each), as the engine loop sends: rows of 52 slots, one a
    window, are about half padding; packed, the rows hold the frames with little to spare."""
    rng = random.Random(1)
    windows = [rng.randint(7, 46) for _ in range(54)]
    rows = WindowLayout.build(windows, 52).rows
    assert rows * 52 < 1.15 * sum(windows) < 0.7 * len(windows) * 52


def test_too_few_rows_are_refused():
    with pytest.raises(ValueError, match="2 rows of windows for a layout of 1"):
        WindowLayout.build([10, 10], 13, rows=1)

"""The encoder's attention windows of many clips packed into few rows of equal size (engine/aligner/batch.py).

Every clip's encoder frames fall into windows (at most 8 chunks, 104 frames; a clip shorter than that is one
window), and a frame attends to the frames of its own window only. Laid out one window a row, a call's rows are
padded to its longest window: with clips of 0.5-3.5 s (7-46 frames) that is 52 rows each, and the projections and
the MLP, which run on every row, do twice the work they need. Packed, several windows share a row of `capacity`
frames (first fit, largest first), each under a mask that lets a frame see only its own window's frames: the
same keys as alone, so the same result, with about as many rows as real frames.

A padding slot (a row's unused tail) belongs to no window; it attends to itself only (a row with no valid key
would be NaN) and is never read.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

PADDING = -1  # the window of a padding slot


def pack(windows: list[int], capacity: int, share: bool = True) -> list[list[int]]:
    """Window sizes (each <= capacity) -> rows, each the indices of the windows it holds (first fit, largest
    first; a row's windows in index order). share=False: a window a row, in order (the layout before packing,
    kept to measure against: the bench's --no-pack-windows)."""
    if any(not 0 < w <= capacity for w in windows):
        raise ValueError(f"windows must be 1..{capacity} frames, not {windows}")
    if not share:
        return [[i] for i in range(len(windows))]
    rows: list[list[int]] = []
    free: list[int] = []
    for i in sorted(range(len(windows)), key=lambda i: (-windows[i], i)):
        row = next((r for r, room in enumerate(free) if room >= windows[i]), None)
        if row is None:
            rows.append([])
            free.append(capacity)
            row = len(rows) - 1
        rows[row].append(i)
        free[row] -= windows[i]
    return [sorted(r) for r in rows]


@dataclass(frozen=True)
class WindowLayout:
    """Where each frame sits in [rows, capacity] slots, and each slot's window.

    `slot_of_frame[f]`: the slot (row * capacity + column) of frame f, frames numbered clip after clip, window after
    window, as embed_chunks_batch lays them out. `window_of_slot` [rows, capacity]: the window each slot holds, or
    PADDING."""

    rows: int
    capacity: int
    slot_of_frame: list[int]
    window_of_slot: torch.Tensor

    @classmethod
    def build(cls, windows: list[int], capacity: int, rows: int | None = None, share: bool = True) -> WindowLayout:
        """The packed layout of `windows` (frame counts, in frame order) in rows of `capacity` slots; `rows`: pad
        with rows of padding up to this many (a captured bucket); share: as in `pack`."""
        packed = pack(windows, capacity, share)
        first = [0]
        for w in windows:
            first.append(first[-1] + w)
        slot_of_frame = [0] * first[-1]
        # numpy, not torch, for the per-window writes (~90 a call of the loop's): each torch operation gives the GIL
        # up and waits to take it back, 30-55 us a window's write beside a busy Python thread
        # (docs/benchmarks/aligner-host/dispatches.py)
        window_of_slot = np.full((len(packed), capacity), PADDING, dtype=np.int64)
        for r, members in enumerate(packed):
            column = 0
            for i in members:
                slot = r * capacity + column
                slot_of_frame[first[i]: first[i] + windows[i]] = range(slot, slot + windows[i])
                window_of_slot[r, column: column + windows[i]] = i
                column += windows[i]
        layout = cls(len(packed), capacity, slot_of_frame, torch.from_numpy(window_of_slot))
        return layout if rows is None else layout.padded(rows)

    def padded(self, rows: int) -> WindowLayout:
        """The same layout with rows of padding after its own, `rows` in all (a captured bucket)."""
        if rows < self.rows:
            raise ValueError(f"{self.rows} rows of windows for a layout of {rows}")
        extra = torch.full((rows - self.rows, self.capacity), PADDING, dtype=torch.int64)
        return WindowLayout(rows, self.capacity, self.slot_of_frame, torch.cat([self.window_of_slot, extra]))

    def mask(self) -> torch.Tensor:
        """[rows, capacity, capacity] bool: slot i may attend to slot j (the same window, or i itself)."""
        w = self.window_of_slot
        same = (w[:, :, None] == w[:, None, :]) & (w[:, :, None] != PADDING)
        return same | torch.eye(self.capacity, dtype=torch.bool)[None]

    def sources(self, frame_rows: torch.Tensor, zero: int) -> torch.Tensor:
        """[rows * capacity] int64: the row each slot reads, `frame_rows[f]` for frame f's slot and `zero` for
        padding (frame_rows: where the frames are, e.g. torch.arange(frames) with a zero row after them)."""
        src = torch.full((self.rows * self.capacity,), zero, dtype=torch.int64)
        src[torch.tensor(self.slot_of_frame, dtype=torch.int64)] = frame_rows
        return src

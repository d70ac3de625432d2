"""A pool of preallocated per-stream state slots (the codec's streaming state, the Talker's KV cache).

Every slot holds the same named tensors. All of them live in one flat byte buffer [num_slots, slot_bytes], and
each name is a strided view `[num_slots, *shape]` of its dtype into it, so that:
- a slot index is a batch row: a step gathers its slots' byte rows in one launch (`gather_rows`), updates the
  named views of those rows in place (`views_of`) and writes them back in one launch (`scatter_rows`), with
  shapes that never depend on which streams are live (what CUDA graphs need);
- resetting any set of slots, whatever dtypes they mix, is one launch (`index_fill_` on the byte buffer).

Slot 0 is the sink: padding rows of a captured batch point at it, so it is never handed out and its contents
are garbage. N slots therefore hold N - 1 streams. The allocator follows nano-vllm's BlockManager: a free deque,
a used set, `can_allocate` (no side effects) before `allocate`, and asserted invariants.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import torch

SINK = 0
_ALIGN = 64  # bytes; every view starts on this boundary (dtype views and vector loads need alignment)


class NoUsableSlot(ValueError):
    """A pool configuration that leaves no slot for a stream (refused at construction, never a hang later)."""


class PoolFull(RuntimeError):
    """allocate() with every usable slot taken; callers check can_allocate() and wait instead."""


@dataclass(frozen=True, slots=True)
class SlotSpec:
    """One named per-slot tensor."""

    shape: tuple[int, ...]
    dtype: torch.dtype

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * torch.empty((), dtype=self.dtype).element_size()


def slot_bytes(layout: Mapping[str, SlotSpec]) -> int:
    """Bytes one slot takes, alignment padding included."""
    return sum(-(-spec.nbytes // _ALIGN) * _ALIGN for spec in layout.values())


class SlotPool:
    """`num_slots` slots of `layout` on `device`; slot 0 is the sink, slots 1..num_slots-1 serve streams."""

    def __init__(self, layout: Mapping[str, SlotSpec], num_slots: int, device: str | torch.device = "cpu",
                 zero_on_allocate: bool = True) -> None:
        if num_slots < 2:
            raise NoUsableSlot(f"num_slots={num_slots} leaves no usable slot: slot {SINK} is the padding sink, so "
                               f"N slots hold N-1 streams; configure num_slots >= 2")
        if not layout:
            raise ValueError("empty slot layout")
        self.layout = dict(layout)
        self.num_slots = num_slots
        self.slot_bytes = slot_bytes(self.layout)
        self.data = torch.zeros(num_slots, self.slot_bytes, dtype=torch.uint8, device=device)
        self.views = self._views(self.data)
        self.free_slots: deque[int] = deque(range(1, num_slots))
        self.used_slots: set[int] = set()
        # False where every value is written before it is read (the Talker's KV cache: position p is written by
        # the step that first reads it), so a new stream costs no memset of its slot.
        self.zero_on_allocate = zero_on_allocate

    @classmethod
    def from_budget(cls, layout: Mapping[str, SlotSpec], budget_bytes: int, max_slots: int | None = None,
                    device: str | torch.device = "cpu") -> SlotPool:
        """As many slots as `budget_bytes` holds (capped at max_slots); NoUsableSlot if that is fewer than 2."""
        per = slot_bytes(layout)
        n = budget_bytes // per
        if max_slots is not None:
            n = min(n, max_slots)
        if n < 2:
            raise NoUsableSlot(f"a budget of {budget_bytes} B holds {budget_bytes // per} slots of {per} B "
                               f"(max_slots={max_slots}); one stream needs 2 (slot {SINK} is the sink)")
        return cls(layout, n, device)

    def _views(self, rows: torch.Tensor) -> dict[str, torch.Tensor]:
        """Name -> [R, *shape] view of its dtype into byte rows [R, slot_bytes]."""
        views, offset = {}, 0
        for name, spec in self.layout.items():
            flat = rows[:, offset: offset + spec.nbytes].view(spec.dtype)  # [R, numel], row stride slot_bytes
            views[name] = flat.view(rows.shape[0], *spec.shape)
            offset += -(-spec.nbytes // _ALIGN) * _ALIGN
        return views

    def gather(self, slots: torch.Tensor) -> dict[str, torch.Tensor]:
        """Copies of these slots' tensors, all read in one launch: name -> [len(slots), *shape]."""
        return self.views_of(self.gather_rows(slots))

    def gather_rows(self, slots: torch.Tensor) -> torch.Tensor:
        """Copies of these slots' byte rows [len(slots), slot_bytes], read in one launch as 8-byte words."""
        return self.data.view(torch.int64)[slots].view(torch.uint8)

    def views_of(self, rows: torch.Tensor) -> dict[str, torch.Tensor]:
        """Name -> [R, *shape] views into byte rows [R, slot_bytes] (from gather_rows): write them in place."""
        return self._views(rows)

    def scatter_rows(self, slots: torch.Tensor, rows: torch.Tensor) -> None:
        """Write byte rows [len(slots), slot_bytes] back to these slots in one launch (as 8-byte words).

        Slots must be distinct, except the sink: which of several sink rows lands there is unspecified.
        """
        self.data.view(torch.int64)[slots] = rows.view(torch.int64)

    def __getitem__(self, name: str) -> torch.Tensor:
        return self.views[name]

    @property
    def device(self) -> torch.device:
        return self.data.device

    @property
    def max_streams(self) -> int:
        return self.num_slots - 1

    @property
    def num_free(self) -> int:
        return len(self.free_slots)

    def can_allocate(self, n: int = 1) -> bool:
        return len(self.free_slots) >= n

    def allocate(self) -> int:
        """A free slot, zeroed (one launch) unless zero_on_allocate is off. Raises PoolFull when none is free."""
        if not self.free_slots:
            raise PoolFull(f"all {self.max_streams} stream slots are in use; check can_allocate() and wait")
        slot = self.free_slots.popleft()
        assert slot != SINK and slot not in self.used_slots, slot
        self.used_slots.add(slot)
        if self.zero_on_allocate:
            self.reset([slot])
        return slot

    def free(self, slot: int) -> None:
        """Release a slot on end or cancel. Its contents stay until the next allocate() resets them."""
        if slot not in self.used_slots:
            raise ValueError(f"slot {slot} is not allocated (sink: {slot == SINK})")
        self.used_slots.remove(slot)
        self.free_slots.append(slot)
        assert len(self.free_slots) + len(self.used_slots) == self.num_slots - 1

    def reset(self, slots: Iterable[int]) -> None:
        """Zero every tensor of these slots in one launch (all dtypes share the byte buffer)."""
        index = torch.as_tensor(list(slots), dtype=torch.long).to(self.device, non_blocking=True)
        self.data.index_fill_(0, index, 0)

    def nbytes(self) -> int:
        return self.data.numel()

    def __repr__(self) -> str:
        return (f"SlotPool(num_slots={self.num_slots}, slot_bytes={self.slot_bytes}, used={len(self.used_slots)}, "
                f"device={self.device}, names={list(self.layout)!r})")

"""A model-free EngineCore for tests: slot bookkeeping, a codec that returns silence of the right length, and a
runner whose rows make frames (or EOS where told)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from voxgate.engine.core import EngineCore
from voxgate.engine.request import Request
from voxgate.engine.scheduler import StepPlan


class Pool:
    """SlotPool's bookkeeping only."""

    def __init__(self, n: int) -> None:
        self.available = list(range(1, n + 1))

    def can_allocate(self, n: int = 1) -> bool:
        return len(self.available) >= n

    def allocate(self) -> int:
        return self.available.pop(0)

    def free(self, slot: int) -> None:
        self.available.append(slot)


class Chunks:
    """A codec that holds buckets (rows, width) and returns silence of the right length, one call in flight."""

    def __init__(self, buckets: Sequence[tuple[int, int]]) -> None:
        self.buckets = list(buckets)
        self.max_width = max(w for _, w in buckets)
        self.calls: list[list[tuple[int, int]]] = []
        self.in_flight: Sequence[tuple[Request, int]] = ()
        self.costs: dict[tuple[int, int], float] = {}  # untimed: ChunkAssembler's row model

    def bucket_for(self, rows: int, width: int) -> tuple[int, int] | None:
        return next((b for b in self.buckets if b[0] >= rows and b[1] >= width), None)

    def launch(self, chunks: Sequence[tuple[Request, int]]) -> None:
        assert not self.in_flight and self.bucket_for(len(chunks), max(n for _, n in chunks)) is not None
        self.calls.append([(r.request_id, n) for r, n in chunks])
        self.in_flight = list(chunks)

    def collect(self) -> list[tuple[Request, np.ndarray]]:
        out = [(r, np.zeros(n * 1920, np.int16)) for r, n in self.in_flight]
        self.in_flight = ()
        return out


class FakeRunner:
    """Every sampled row makes a frame; rows listed in `eos_at` (request_id -> frame) sample EOS there.
    `first_frame_with_prompt`: the step completing a prompt makes its first frame (as the Qwen3-TTS runner), or
    (False) a decode row of a later step does."""

    def __init__(self, buckets: Sequence[tuple[int, int]] = ((16, 1), (4, 4), (2, 16)),
                 first_frame_with_prompt: bool = True) -> None:
        self.chunks = Chunks(buckets)
        self.last_fill_s, self.last_bucket = 0.0, "x"
        self.first_frame_with_prompt = first_frame_with_prompt
        self.eos_at: dict[int, int] = {}
        self.plans: list[StepPlan] = []

    def launch(self, plan: StepPlan) -> tuple[StepPlan, list[int]]:
        self.plans.append(plan)
        return plan, [r.num_launched for r in plan.sampled]  # each row's frame index, as the GPU step sees it

    def finish(self, handle: tuple[StepPlan, list[int]]) -> np.ndarray:
        plan, frame_index = handle
        return np.array([self.eos_at.get(r.request_id) == i for r, i in zip(plan.sampled, frame_index, strict=True)],
                        dtype=bool)


def make_request(tokens: int = 10, budget: int = 8, schedule: tuple[int, ...] = (1, 2, 4)) -> Request:
    return Request(prompt=None, num_prompt_tokens=tokens, frame_budget=budget, chunk_schedule=schedule)


def run_core(core: EngineCore, limit: int = 500) -> list:
    outs = []
    for _ in range(limit):
        if not core.has_work:
            break
        outs.append(core.step())
    assert not core.has_work
    return outs

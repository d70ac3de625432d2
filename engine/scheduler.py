"""Which streams run in the next step: plain Python over `Request` numbers, no tensors (nano-vllm's scheduler).

A step has up to `max_rows` decode rows (one new frame each) plus up to `max_prefill_tokens` prompt tokens of up
to `max_prefills` new streams riding along, so a new prompt never stalls decoding and decoding never waits
behind a prompt. Admission takes a slot (`can_allocate` first; a stream waits for a slot, it never fails for
lack of one) in arrival order. A long prompt is split over steps (chunked prefill). Where the runner samples a
stream's first frame in the step that completes its prompt (`first_frames`), that step makes a frame for the
stream too (`StepPlan.sampled`), and a prompt's last token waits for the text id the frame's next input adds.

Deadlines: when more streams can decode than a step has rows, rows go to the streams whose listeners run dry
first (`Request.generation_deadline`); the rest wait a step. `deadline_order=False` takes them round-robin
instead (the comparison arm of the benchmark). A stream more than `max_ahead_s` ahead of its listener waits
whatever the load: a client that stops reading stops its stream's generation too.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from operator import itemgetter

import numpy as np

from .config import EngineConfig
from .request import Request, Status


class SlotAllocator:
    """The slot bookkeeping the scheduler needs (engine.slot_pool.SlotPool has this shape)."""

    def can_allocate(self, n: int = 1) -> bool: ...  # pragma: no cover - protocol

    def allocate(self) -> int: ...  # pragma: no cover - protocol

    def free(self, slot: int) -> None: ...  # pragma: no cover - protocol


_LOOP = EngineConfig()  # the defaults: one place (engine/config.py)


@dataclass(slots=True)
class SchedulerConfig:
    max_rows: int = _LOOP.max_rows  # decode rows per step (the largest captured bucket)
    max_prefills: int = _LOOP.max_prefills  # new streams whose prompt tokens ride one step
    max_prefill_tokens: int = max(_LOOP.prefill_buckets)  # prompt tokens per step (the largest prefill bucket)
    deadline_order: bool = _LOOP.deadline_order  # rows to the streams closest to a stall when a step cannot take all
    urgent_s: float = _LOOP.urgent_s  # decode a stream's pending frames early when its listener runs dry within this
    max_ahead_s: float = _LOOP.max_ahead_s  # a stream this far ahead of its listener gets no row (backpressure)
    max_pending_frames: int | None = None  # a stream with this many frames launched, not decoded gets no row (ring)

    @classmethod
    def of(cls, config: EngineConfig) -> SchedulerConfig:
        """The scheduler's part of an engine's options."""
        rows = tuple(b for b in config.row_buckets if b <= config.max_rows)
        return cls(max_rows=max(rows), max_prefills=config.max_prefills,
                   max_prefill_tokens=max(config.prefill_buckets), deadline_order=config.deadline_order,
                   urgent_s=config.urgent_s, max_ahead_s=config.max_ahead_s)

    def __post_init__(self) -> None:
        if self.max_rows < 1 or self.max_prefills < 1 or self.max_prefill_tokens < 1:
            raise ValueError("max_rows, max_prefills and max_prefill_tokens must be at least 1")
        if self.urgent_s < 0 or self.max_ahead_s <= 0:
            raise ValueError("urgent_s must be >= 0 and max_ahead_s > 0")


@dataclass(slots=True)
class Prefill:
    request: Request
    start: int  # first prompt token of this step's piece
    count: int  # tokens in this step

    @property
    def completes(self) -> bool:
        return self.start + self.count == self.request.num_prompt_tokens


@dataclass(slots=True)
class StepPlan:
    decodes: list[Request] = field(default_factory=list)  # one new frame each, in row order
    prefills: list[Prefill] = field(default_factory=list)
    # The step that completes a prompt also samples that stream's first frame (the runner's
    # `first_frame_with_prompt`); else the first frame comes from a decode row of a later step.
    first_frames: bool = False

    @property
    def sampled(self) -> list[Request]:
        """The streams this step makes a frame for, in the order the runner reports them: the decode rows, then (with
        `first_frames`) the streams whose prompt it completes."""
        if not self.first_frames:
            return self.decodes
        return self.decodes + [p.request for p in self.prefills if p.completes]

    @property
    def empty(self) -> bool:
        return not self.decodes and not self.prefills

    @property
    def num_prefill_tokens(self) -> int:
        return sum(p.count for p in self.prefills)


class Scheduler:
    def __init__(self, config: SchedulerConfig, slots: SlotAllocator,
                 clock: Callable[[], float] = time.monotonic, first_frames: bool = False) -> None:
        self.config = config
        self.slots = slots
        self.clock = clock
        self.first_frames = first_frames  # plans' StepPlan.first_frames
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self._rotation = 0  # round-robin start when deadline_order is off

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def add(self, request: Request) -> None:
        request.status = Status.WAITING
        self.waiting.append(request)

    def schedule(self) -> StepPlan:
        plan = StepPlan(first_frames=self.first_frames)
        cfg = self.config
        now = self.clock()
        budget = cfg.max_prefill_tokens
        # Streams already prefilling continue first (their slot is held), then new ones in arrival order.
        for request in self.running:
            if not request.prefilled and budget > 0 and len(plan.prefills) < cfg.max_prefills:
                budget -= self._prefill(plan, request, budget, now)
        while (self.waiting and budget > 0 and len(plan.prefills) < cfg.max_prefills
               and self.slots.can_allocate()):
            request = self.waiting.popleft()
            request.slot = self.slots.allocate()
            request.status = Status.RUNNING
            self.running.append(request)
            budget -= self._prefill(plan, request, budget, now)
        limit = now + cfg.max_ahead_s
        room = cfg.max_pending_frames or 1 << 62
        plan.decodes = self._rows([r for r in self.running if r.can_decode and r.generation_deadline() < limit
                                   and r.num_launched - r.num_decoded < room], now)
        for request in plan.decodes:
            if request.first_step_at is None:
                request.first_step_at = now
        return plan

    @staticmethod
    def _prefill(plan: StepPlan, request: Request, budget: int, now: float) -> int:
        count = min(budget, request.num_prompt_tokens - request.num_prefilled)
        if plan.first_frames and count == request.num_prompt_tokens - request.num_prefilled \
                and not request.frame_input_ready:
            count -= 1  # the step completing the prompt samples frame 0, whose next input needs a text id not here yet
        if count <= 0:
            return 0
        plan.prefills.append(Prefill(request, request.num_prefilled, count))
        if request.first_step_at is None:
            request.first_step_at = now
        return count

    def _rows(self, candidates: list[Request], now: float) -> list[Request]:
        rows = self.config.max_rows
        if len(candidates) <= rows:
            return candidates
        if self.config.deadline_order:
            candidates.sort(key=Request.generation_deadline)
            return candidates[:rows]
        start = self._rotation % len(candidates)
        self._rotation += rows
        return (candidates[start:] + candidates[:start])[:rows]

    def due_pieces(self, max_width: int, now: float | None = None) -> list[tuple[Request, int, bool]]:
        """(request, frames, closes) for every stream with a codec piece due, most urgent first.

        A chunk of the schedule is decoded in pieces of at most `max_width` frames, one per codec call, so every
        call has rows of about one width (a call is as wide as its widest row); the pieces of a chunk are handed
        over together when the last one is decoded (`closes`). A piece is due when it is full (`max_width` frames
        or the rest of the chunk), when the stream has ended (what is left), or, once the stream is playing, when
        its listener runs dry within `urgent_s` (what is there, closing the chunk: a short chunk beats a pause)."""
        now = self.clock() if now is None else now
        due = []
        for r in self.running:
            pending = r.num_frames - r.num_decoded
            if pending <= 0:
                continue
            deadline = r.deadline()
            if self.urgent(r, now):
                due.append((deadline, r, min(pending, max_width), True))
                continue
            rest = r.next_chunk - r.chunk_launched
            if r.ended or pending >= min(rest, max_width):
                n = min(pending, rest, max_width)
                due.append((deadline, r, n, n == rest or (r.ended and n == pending)))
        due.sort(key=itemgetter(0))
        return [(r, n, closes) for _, r, n, closes in due]

    @staticmethod
    def postprocess(plan: StepPlan, eos: np.ndarray) -> int:
        """Count what a finished step made (`eos`: a bool per sampled row, `StepPlan.sampled`); returns the number
        of frames."""
        made = 0
        for request, ended in zip(plan.sampled, eos.tolist(), strict=True):
            if request.ended or request.status is not Status.RUNNING:
                continue  # launched before its stream ended (pipelined) or was cancelled: not a frame
            if ended:
                request.ended, request.finish_reason = True, "eos"
                continue
            request.num_frames += 1
            made += 1
            if request.num_frames >= request.frame_budget:
                request.ended, request.finish_reason = True, "budget"
        return made

    def urgent(self, request: Request, now: float | None = None) -> bool:
        """The stream is playing and its listener runs dry within `urgent_s`: what is decoded goes out now."""
        urgent_s = self.config.urgent_s
        if urgent_s <= 0 or request.first_audio_at is None:
            return False
        return request.deadline() - (self.clock() if now is None else now) < urgent_s

    def finish(self, request: Request, status: Status, reason: str | None = None) -> None:
        """End a stream: free its slot at this step boundary (end, cancel or error)."""
        if request.status in (Status.FINISHED, Status.ABORTED):
            return
        if request.status is Status.WAITING:
            if request in self.waiting:  # a stream cancelled before the loop took it in was never added
                self.waiting.remove(request)
        else:
            self.running.remove(request)
            self.slots.free(request.slot)
        request.status = status
        if reason is not None:
            request.finish_reason = reason

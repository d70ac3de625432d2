"""EngineCore: `add`, `abort`, and `step()` = schedule -> run -> postprocess. Synchronous, single-threaded: the
engine loop (loop.py) owns it from one worker thread; nothing here knows about asyncio.

The model side is a `Runner` (engine/qwen3tts/runner.py): `run(plan)` executes one step for the plan's rows and
returns which decode rows sampled the end-of-speech code; `decode(chunks)` turns the frames of the streams due a
chunk into PCM16, all in one codec call.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from .request import Request, Status
from .scheduler import Scheduler, SchedulerConfig, SlotAllocator, StepPlan


class Runner(Protocol):
    max_chunk_frames: int  # widest codec chunk one call takes per stream
    last_fill_s: float  # host time of the last run() before it waited for the GPU
    last_bucket: str  # the bucket the last run() replayed

    def run(self, plan: StepPlan) -> np.ndarray:
        """Run one step; a bool per decode row: True where the row sampled end-of-speech (no frame made)."""
        ...

    def decode(self, chunks: Sequence[tuple[Request, int]]) -> list[np.ndarray]:
        """PCM16 of each stream's next `n` frames (those after `num_decoded`), one codec call for all."""
        ...


@dataclass(slots=True)
class StepOutput:
    chunks: list[tuple[Request, np.ndarray]] = field(default_factory=list)  # audio to hand over, in order
    finished: list[Request] = field(default_factory=list)  # streams whose audio is complete (after chunks)
    started: list[Request] = field(default_factory=list)  # streams whose first step this was
    num_rows: int = 0
    num_prefill_tokens: int = 0
    num_frames: int = 0  # frames generated
    bucket: str = ""  # the runner's step bucket ("rows+tokens")
    times: dict[str, float] = field(default_factory=dict)  # seconds: schedule, fill, gpu, codec, post


class EngineCore:
    def __init__(self, runner: Runner, slots: SlotAllocator, config: SchedulerConfig | None = None,
                 max_codec_frames: int = 256) -> None:
        self.runner = runner
        self.scheduler = Scheduler(config or SchedulerConfig(), slots)
        self.max_codec_frames = max_codec_frames  # padded rows x width of one codec call

    @property
    def has_work(self) -> bool:
        return self.scheduler.has_work

    def add(self, request: Request) -> None:
        self.scheduler.add(request)

    def abort(self, request: Request, reason: str = "aborted") -> None:
        """Free the request's slot at this step boundary; no more of its audio is produced."""
        self.scheduler.finish(request, Status.ABORTED, reason)

    def step(self) -> StepOutput:
        t0 = time.perf_counter()
        plan = self.scheduler.schedule()
        t1 = time.perf_counter()
        eos = self.runner.run(plan) if not plan.empty else np.zeros(0, dtype=bool)
        t2 = time.perf_counter()
        out = StepOutput(num_rows=len(plan.decodes), num_prefill_tokens=plan.num_prefill_tokens,
                         bucket=self.runner.last_bucket if not plan.empty else "")
        out.started = [p.request for p in plan.prefills if p.start == 0]
        out.num_frames = self._advance(plan, eos)
        chunks = self._chunks()
        t3 = time.perf_counter()
        if chunks:
            audio = self.runner.decode(chunks)
            now = time.monotonic()
            for (request, n), pcm in zip(chunks, audio, strict=True):
                request.num_decoded += n
                request.num_chunks += 1
                if request.first_audio_at is None:
                    request.first_audio_at = now
                out.chunks.append((request, pcm))
        t4 = time.perf_counter()
        for request in list(self.scheduler.running):
            if request.ended and request.pending_frames == 0:
                self.scheduler.finish(request, Status.FINISHED)
                out.finished.append(request)
        fill = self.runner.last_fill_s if not plan.empty else 0.0
        out.times = {"schedule": t1 - t0, "fill": fill, "gpu": t2 - t1 - fill, "codec": t4 - t3,
                     "post": t3 - t2 + time.perf_counter() - t4}
        return out

    def _advance(self, plan: StepPlan, eos: np.ndarray) -> int:
        """Count what the step made; returns the number of frames."""
        for piece in plan.prefills:
            piece.request.num_prefilled += piece.count
        made = 0
        for request, ended in zip(plan.decodes, eos.tolist(), strict=True):
            if ended:
                request.ended, request.finish_reason = True, "eos"
                continue
            request.num_frames += 1
            made += 1
            if request.num_frames >= request.frame_budget:
                request.ended, request.finish_reason = True, "budget"
        return made

    def _chunks(self) -> list[tuple[Request, int]]:
        """The due chunks that fit one codec call (most urgent first); the rest wait for the next step."""
        cap = self.runner.max_chunk_frames
        chosen: list[tuple[Request, int]] = []
        width = 0
        for request, n in self.scheduler.due_chunks():
            n = min(n, cap)
            w = max(width, n)
            if chosen and (len(chosen) + 1) * w > self.max_codec_frames:
                break
            chosen.append((request, n))
            width = w
        return chosen

    def fail_all(self, reason: str = "error") -> list[Request]:
        """Abort every stream (the runner failed): their listeners get an error, the slots come back."""
        failed = list(self.scheduler.waiting) + list(self.scheduler.running)
        for request in failed:
            self.scheduler.finish(request, Status.ABORTED, reason)
        return failed

    def stats(self) -> dict[str, Any]:
        s = self.scheduler
        return {"waiting": len(s.waiting), "running": len(s.running),
                "decoding": sum(1 for r in s.running if r.can_decode)}

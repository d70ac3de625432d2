"""EngineCore: `add`, `abort`, and `step()` = schedule -> run -> postprocess. Synchronous, single-threaded: the
engine loop (loop.py) owns it from one worker thread; nothing here knows about asyncio.

The model side is a `Runner` (engine/qwen3tts/runner.py): `launch(plan)` starts one step for the plan's rows,
`finish(handle)` says which decode rows sampled the end-of-speech code. Its `chunks` decoder turns the frames of the
streams due a codec piece into PCM16, one codec call a step, launched after the step and collected in the next
iteration, so the codec runs on the GPU beside the next decode step. A chunk of a stream's schedule is decoded in
pieces no wider than the codec's `max_width` (a call costs its widest row times its rows: one 16-frame chunk among
1-frame ones made every row 16 wide) and handed over whole when its last piece is back.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from .request import Request, Status
from .scheduler import Scheduler, SchedulerConfig, SlotAllocator, StepPlan


class ChunkCalls(Protocol):
    max_width: int  # widest piece one call takes per stream

    def bucket_for(self, rows: int, width: int) -> object | None:
        """Something (a bucket) when one call can take rows x width, else None."""
        ...

    def launch(self, chunks: Sequence[tuple[Request, int]]) -> None:
        """Start decoding each stream's next n frames (those after its num_decoded)."""
        ...

    def collect(self) -> list[tuple[Request, np.ndarray]]:
        """The launched call's PCM16 per chunk, in order (waits for it); [] when none is in flight."""
        ...


class Runner(Protocol):
    chunks: ChunkCalls
    last_fill_s: float  # host time of the last launch()
    last_bucket: str  # the bucket the last launch() replayed

    def launch(self, plan: StepPlan) -> object:
        """Start one step for the plan (fill its inputs, replay); returns a handle for `finish`."""
        ...

    def finish(self, handle: object) -> np.ndarray:
        """Wait for that step; a bool per decode row: True where the row sampled end-of-speech. Also lets the next
        codec call read the frames that step stored."""
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
    # Nothing launched, read or handed over: the running streams wait for something outside (text still to come, a
    # listener far behind), so the loop may sleep until it is woken instead of spinning.
    idle: bool = False


class EngineCore:
    """`pipeline`: launch step N+1 before reading step N's results, so the host's work between steps (reading the
    frames, ends, codec pieces, the hand-off, scheduling and filling the next step) runs while the GPU computes
    instead of between its steps. A decode row's inputs do not depend on the host's reading of the step before (its
    position is one more, its input embedding stays on the GPU), so only an end-of-speech is learnt one step late:
    that stream's row in the step already launched is dropped (its frame never counts, its slot writes land before
    any new owner's). Off: every step is read before the next is scheduled."""

    def __init__(self, runner: Runner, slots: SlotAllocator, config: SchedulerConfig | None = None,
                 pipeline: bool = True) -> None:
        self.runner = runner
        self.scheduler = Scheduler(config or SchedulerConfig(), slots)
        self.pipeline = pipeline
        self._launched: deque[tuple[StepPlan, object]] = deque()  # steps launched, not yet read (oldest first)
        self._closing: list[bool] = []  # per piece of the codec call in flight: does it close its chunk

    @property
    def has_work(self) -> bool:
        return self.scheduler.has_work or bool(self._launched)

    def add(self, request: Request) -> None:
        self.scheduler.add(request)

    def abort(self, request: Request, reason: str = "aborted") -> None:
        """Free the request's slot at this step boundary; no more of its audio is produced."""
        self.scheduler.finish(request, Status.ABORTED, reason)

    def step(self) -> StepOutput:
        t0 = time.perf_counter()
        plan = self.scheduler.schedule()
        t1 = time.perf_counter()
        if not plan.empty:
            self._launched.append((plan, self.runner.launch(plan)))
            for piece in plan.prefills:
                piece.request.num_prefilled += piece.count
            for request in plan.decodes:
                request.num_launched += 1
        out = StepOutput(num_rows=len(plan.decodes), num_prefill_tokens=plan.num_prefill_tokens,
                         bucket=self.runner.last_bucket if not plan.empty else "")
        out.started = [p.request for p in plan.prefills if p.start == 0]
        t2 = time.perf_counter()
        # Read the steps before the newest (pipelined) or all of them, then the codec call of the last iteration,
        # which ran beside them and is almost always done: one wait for the GPU per step, so the worker gives up
        # the GIL (to a busy event loop) once, not twice.
        keep = 1 if self.pipeline and not plan.empty else 0
        while len(self._launched) > keep:
            done, handle = self._launched.popleft()
            out.num_frames += self._advance(done, self.runner.finish(handle))
        t3 = time.perf_counter()
        now = time.monotonic()
        for (request, pcm), closes in zip(self.runner.chunks.collect(), self._closing, strict=True):
            if request.status is Status.ABORTED:
                continue
            request.pcm_parts.append(pcm)
            if closes:
                self._hand_over(request, now, out)
        self._closing = []
        # A chunk whose decoded pieces wait for frames not yet made (a stream waiting for text) goes out as it is
        # once its listener is about to run dry: a short chunk beats a pause.
        for request in self.scheduler.running:
            if request.pcm_parts and request.pending_frames == 0 and self.scheduler.urgent(request):
                self._close_early(request, now, out)
        t4 = time.perf_counter()
        pieces = self._pieces()
        if pieces:
            self.runner.chunks.launch([(request, n) for request, n, _ in pieces])
            for request, n, closes in pieces:
                request.num_decoded += n
                request.chunk_launched += n
                if closes:
                    request.num_chunks += 1
                    request.chunk_launched = 0
            self._closing = [closes for _, _, closes in pieces]
        in_flight = {id(r) for r, _ in self.runner.chunks.in_flight}
        for request in list(self.scheduler.running):
            if request.ended and request.pending_frames == 0 and id(request) not in in_flight:
                if request.pcm_parts:  # ended on a piece that did not close its chunk: what there is, now
                    self._close_early(request, now, out)
                self.scheduler.finish(request, Status.FINISHED)
                out.finished.append(request)
        out.idle = plan.empty and not pieces and not self._launched and not out.chunks and not out.finished \
            and out.num_frames == 0
        fill = self.runner.last_fill_s if not plan.empty else 0.0
        out.times = {"schedule": t1 - t0, "fill": fill, "gpu": t3 - t2, "codec": t4 - t3,
                     "post": time.perf_counter() - t4 + (t2 - t1 - fill)}
        return out

    def _advance(self, plan: StepPlan, eos: np.ndarray) -> int:
        """Count what a step made; returns the number of frames."""
        made = 0
        for request, ended in zip(plan.decodes, eos.tolist(), strict=True):
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

    def _pieces(self) -> list[tuple[Request, int, bool]]:
        """The due pieces one codec call takes (most urgent first): each joins while some bucket holds the call
        with it; a piece that does not fit waits for the next step."""
        calls = self.runner.chunks
        chosen: list[tuple[Request, int, bool]] = []
        width = 0
        for request, n, closes in self.scheduler.due_pieces(calls.max_width):
            if calls.bucket_for(len(chosen) + 1, max(width, n)) is None:
                continue
            chosen.append((request, n, closes))
            width = max(width, n)
        return chosen

    @classmethod
    def _close_early(cls, request: Request, now: float, out: StepOutput) -> None:
        """Close the open chunk before its width is reached, on the pieces decoded so far (none in flight)."""
        request.num_chunks += 1
        request.chunk_launched = 0
        cls._hand_over(request, now, out)

    @staticmethod
    def _hand_over(request: Request, now: float, out: StepOutput) -> None:
        """The open chunk's pieces as one chunk of audio: every frame decoded so far (no piece is in flight)."""
        parts = request.pcm_parts
        pcm = parts[0] if len(parts) == 1 else np.concatenate(parts)
        parts.clear()
        if request.first_audio_at is None:
            request.first_audio_at = now
        request.num_delivered = request.num_decoded
        out.chunks.append((request, pcm))

    def fail_all(self, reason: str = "error") -> list[Request]:
        """Abort every stream (the runner failed): their listeners get an error, the slots come back."""
        failed = list(self.scheduler.waiting) + list(self.scheduler.running)
        self._launched.clear()
        for request in failed:
            self.scheduler.finish(request, Status.ABORTED, reason)
        return failed

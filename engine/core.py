"""EngineCore: `add`, `abort`, and `step()` = schedule -> launch -> read finished steps -> postprocess -> chunks.
Synchronous, single-threaded: the engine loop (loop.py) owns it from one worker thread; nothing here knows about
asyncio.

Each stage has one owner: the `Scheduler` picks the rows and counts what a step made (`postprocess`), the `Runner`
(engine/qwen3tts/runner.py) launches a step and says which of its rows sampled end-of-speech, and the
`ChunkAssembler` (chunks.py) runs the codec pieces of the streams due audio and hands their chunks over.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from .chunks import ChunkAssembler, ChunkCalls
from .config import EngineConfig
from .request import Request, Status
from .scheduler import Scheduler, SchedulerConfig, SlotAllocator, StepPlan

_LOOP = EngineConfig()  # the defaults: one place (engine/config.py)


class Runner(Protocol):
    chunks: ChunkCalls
    last_fill_s: float  # host time of the last launch()
    last_bucket: str  # the bucket the last launch() replayed
    # True: the step that completes a prompt samples that stream's first frame too (StepPlan.first_frames); False:
    # a stream's frames all come from decode rows, the first in the step after its prompt's.
    first_frame_with_prompt: bool

    def launch(self, plan: StepPlan) -> object:
        """Start one step for the plan (fill its inputs, replay); returns a handle for `finish`."""
        ...

    def finish(self, handle: object) -> np.ndarray:
        """Wait for that step; a bool per sampled row (`StepPlan.sampled`): True where the row sampled
        end-of-speech. Also lets the next codec call read the frames that step stored."""
        ...


@dataclass(slots=True)
class StepOutput:
    chunks: list[tuple[Request, np.ndarray]] = field(default_factory=list)  # audio to hand over, in order
    handed_early: list[tuple[Request, np.ndarray]] = field(default_factory=list)  # chunks already handed over
    finished: list[Request] = field(default_factory=list)  # streams whose audio is complete (after chunks)
    finished_early: list[Request] = field(default_factory=list)  # the same, already handed over (after handed_early)
    started: list[Request] = field(default_factory=list)  # streams whose first step this was
    num_rows: int = 0
    num_prefill_tokens: int = 0
    num_frames: int = 0  # frames generated
    bucket: str = ""  # the runner's step bucket ("rows+tokens")
    times: dict[str, float] = field(default_factory=dict)  # seconds: schedule, fill, gpu, codec, post
    started_at: float = 0.0  # perf_counter at the step's start
    stages: dict[str, float] = field(default_factory=dict)  # seconds in each stage, in order (gpu_timeline.py)
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
                 pipeline: bool = _LOOP.pipeline, early_first_chunk: bool = _LOOP.early_first_chunk,
                 pipeline_min_rows: int = _LOOP.pipeline_min_rows, codec_fill: bool = _LOOP.codec_fill,
                 early_end: bool = _LOOP.early_end) -> None:
        self.runner = runner
        self.scheduler = Scheduler(config or SchedulerConfig(), slots, first_frames=runner.first_frame_with_prompt)
        self.pipeline = pipeline
        # Steps with fewer sampled rows than this are read before the next is launched (a new stream's prompt then
        # waits behind no queued step, at the cost of the host's time a step); steps with this many, or with prompt
        # pieces only, leave a step queued. Default 1: one stream's steps overlap their host work too.
        self.pipeline_min_rows = pipeline_min_rows
        # A codec call that carries a stream's first chunk is collected before the step in flight is waited for (it
        # ran beside that step and is done first) and handed to `hand_over_early` at once: the first audio does not
        # wait for a whole decode step. Set by the engine loop; None: every chunk leaves with its step's output.
        self.early_first_chunk = early_first_chunk
        # Likewise a codec call that holds a stream's last frames: its last chunk and its end are handed over before
        # the wait for the step in flight, so the client's next request can join the next step launched, not the
        # one after (closed loop: one row-step a request) and a turn ends a step sooner.
        self.early_end = early_end
        # (chunks, streams finished), handed over early; set by the engine loop
        self.hand_over_early: Callable[[list[tuple[Request, np.ndarray]], list[Request]], None] | None = None
        self._launched: deque[tuple[StepPlan, object]] = deque()  # steps launched, not yet read (oldest first)
        self._first_frame_due: list[Request] = []  # first frame's step launched, the frame not yet counted
        self.chunks = ChunkAssembler(runner.chunks, self.scheduler, codec_fill)

    @property
    def has_work(self) -> bool:
        return self.scheduler.has_work or bool(self._launched)

    def add(self, request: Request) -> None:
        self.scheduler.add(request)

    def abort(self, request: Request, reason: str = "aborted") -> None:
        """Free the request's slot at this step boundary; no more of its audio is produced."""
        self.scheduler.finish(request, Status.ABORTED, reason)

    def step(self) -> StepOutput:
        clock = _Clock()
        plan = self.scheduler.schedule()
        clock.mark("schedule")
        out = self._launch(plan)
        clock.mark("launch")
        if self.hand_over_early is not None and ((self.early_first_chunk and self.chunks.first_in_flight)
                                                 or (self.early_end and self.chunks.end_in_flight)):
            now = time.monotonic()
            early = self.chunks.collect(now)
            finished: list[Request] = []
            if self.early_end:
                handed, finished = self.chunks.finish_ended(now)
                early += handed
            _stamp_first_chunks(early)
            self.hand_over_early(early, finished)
            out.handed_early, out.finished_early = early, finished
        for done, eos in self._read_finished(plan):
            out.num_frames += self.scheduler.postprocess(done, eos)
        clock.mark("gpu")
        now = time.monotonic()
        self._stamp_first_frames(now)
        out.chunks = self.chunks.collect(now)
        clock.mark("codec")
        launched_codec = self.chunks.launch()
        handed, out.finished = self.chunks.finish_ended(now)
        out.chunks += handed
        _stamp_first_chunks(out.chunks)
        out.idle = plan.empty and not launched_codec and not self._launched and not out.chunks \
            and not out.finished and not out.handed_early and not out.finished_early and out.num_frames == 0
        clock.mark("post")
        fill = self.runner.last_fill_s if not plan.empty else 0.0
        out.times = {"schedule": clock["schedule"], "fill": fill, "gpu": clock["gpu"], "codec": clock["codec"],
                     "post": clock["post"] + clock["launch"] - fill}
        out.started_at, out.stages = clock.start, clock.spent
        return out

    def _launch(self, plan: StepPlan) -> StepOutput:
        """Start the plan's step on the runner (nothing for an empty plan) and count what it launched."""
        if not plan.empty:
            self._launched.append((plan, self.runner.launch(plan)))
            launched_at = time.monotonic()
            for piece in plan.prefills:
                piece.request.num_prefilled += piece.count
                if piece.request.prefill_launched_at is None:
                    piece.request.prefill_launched_at = launched_at
            for request in plan.sampled:
                request.num_launched += 1
                if request.decode_launched_at is None:
                    request.decode_launched_at = launched_at
                    self._first_frame_due.append(request)
        out = StepOutput(num_rows=len(plan.decodes), num_prefill_tokens=plan.num_prefill_tokens,
                         bucket=self.runner.last_bucket if not plan.empty else "")
        out.started = [p.request for p in plan.prefills if p.start == 0]
        return out

    def _stamp_first_frames(self, now: float) -> None:
        """The first-audio timeline's `first_frame`: only the few streams waiting for theirs are looked at."""
        if self._first_frame_due:
            due = self._first_frame_due
            for request in due:
                if request.num_frames and request.first_frame_at is None:
                    request.first_frame_at = now
            self._first_frame_due = [r for r in due if r.first_frame_at is None and r.status is Status.RUNNING
                                     and not r.ended]

    def _read_finished(self, plan: StepPlan) -> Iterator[tuple[StepPlan, np.ndarray]]:
        """The steps before the newest (pipelined) or all of them, each with its end-of-speech rows. The codec call
        collected after them ran beside them and is almost always done: one wait for the GPU per step, so the
        worker gives up the GIL (to a busy event loop) once, not twice."""
        # (a step of prompt pieces that complete none has no frame to read: the next may follow it at once)
        rows = len(plan.sampled)
        keep = 1 if self.pipeline and not plan.empty and (rows >= self.pipeline_min_rows or not rows) else 0
        while len(self._launched) > keep:
            done, handle = self._launched.popleft()
            yield done, self.runner.finish(handle)

    def fail_all(self, reason: str = "error") -> list[Request]:
        """Abort every stream (the runner failed): their listeners get an error, the slots come back."""
        failed = list(self.scheduler.waiting) + list(self.scheduler.running)
        self._launched.clear()
        for request in failed:
            self.scheduler.finish(request, Status.ABORTED, reason)
        return failed


def _stamp_first_chunks(chunks: list[tuple[Request, np.ndarray]]) -> None:
    """The first-audio timeline's `codec`: the first chunk of a stream is decoded (its codec call collected)."""
    now = None
    for request, _ in chunks:
        if request.first_decoded_at is None:
            now = time.monotonic() if now is None else now
            request.first_decoded_at = now


class _Clock:
    """Seconds spent in each stage of a step, by the name of the stage that just ended."""

    def __init__(self) -> None:
        self.start = self._last = time.perf_counter()
        self.spent: dict[str, float] = {}  # in the order the stages ran

    def mark(self, stage: str) -> None:
        now = time.perf_counter()
        self.spent[stage] = now - self._last
        self._last = now

    def __getitem__(self, stage: str) -> float:
        return self.spent[stage]

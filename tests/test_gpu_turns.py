"""GPU turns (engine/gpu_turns.py): a side thread's GPU work queued by the engine loop's thread between its steps.
The work runs on the loop's thread (off CUDA) and the side thread goes on only once it is queued; before the loop
starts and after it stops, the side thread runs its own work; errors reach the side thread only. On CUDA, the
loop's kernels before a turn come before its work and the loop's kernels after it come after. Order is driven by
events, never by time."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest
import torch
from engine_core_support import FakeRunner, Pool
from engine_core_support import make_request as _request
from voxgate.engine.base import SynthesisRequest
from voxgate.engine.core import EngineCore
from voxgate.engine.gpu_turns import GpuTurns
from voxgate.engine.graphs import GraphSet
from voxgate.engine.loop import EngineLoop
from voxgate.engine.scheduler import SchedulerConfig


class Side(threading.Thread):
    """A side thread that takes one turn: `returned` once take() is back, with its result or error."""

    def __init__(self, turns: GpuTurns, work: Callable[[], object]) -> None:
        super().__init__(name="side", daemon=True)
        self.turns, self.work = turns, work
        self.returned = threading.Event()
        self.result: object = None
        self.error: Exception | None = None
        self.start()

    def run(self) -> None:
        try:
            self.result = self.turns.take(self.work)
        except Exception as exc:
            self.error = exc
        self.returned.set()


def on_thread(log: list[str], value: object = None) -> Callable[[], object]:
    """Work that records the thread it ran on."""
    def work() -> object:
        log.append(threading.current_thread().name)
        return value

    return work


def test_before_the_loop_opens_and_after_it_closes_the_side_thread_runs_its_own_work() -> None:
    turns = GpuTurns("cpu")
    ran: list[str] = []
    side = Side(turns, on_thread(ran, 1))
    assert side.returned.wait(30) and side.result == 1 and ran == ["side"]
    turns.open()
    turns.close()
    side = Side(turns, on_thread(ran, 2))
    assert side.returned.wait(30) and side.result == 2 and ran == ["side", "side"] and turns.taken == 0


def test_an_open_loop_runs_the_work_on_its_thread_and_the_side_thread_waits_for_it() -> None:
    woken = threading.Event()
    turns = GpuTurns("cpu", wake=woken.set)
    turns.open()
    ran: list[str] = []
    side = Side(turns, on_thread(ran, "done"))
    assert woken.wait(30)  # the loop was woken for it ...
    assert not side.returned.is_set() and ran == []  # ... and nothing ran before its turn
    threading.current_thread().name, name = "loop", threading.current_thread().name
    try:
        while turns.run_pending() == 0:  # the side thread appends its turn after the wake-up or before it
            pass
    finally:
        threading.current_thread().name = name
    assert side.returned.wait(30) and side.result == "done" and ran == ["loop"] and turns.taken == 1
    assert turns.run_pending() == 0


def test_an_error_in_a_turn_reaches_the_side_thread_and_the_loop_goes_on() -> None:
    turns = GpuTurns("cpu")
    turns.open()

    def broken() -> None:
        raise RuntimeError("no such graph")

    failing = Side(turns, broken)
    while turns.run_pending() == 0:
        pass
    assert failing.returned.wait(30) and isinstance(failing.error, RuntimeError)
    ran: list[str] = []
    fine = Side(turns, on_thread(ran, 3))
    while turns.run_pending() == 0:
        pass
    assert fine.returned.wait(30) and fine.result == 3 and fine.error is None


def test_a_turn_still_waiting_when_the_loop_closes_runs_on_the_side_thread() -> None:
    woken = threading.Event()
    turns = GpuTurns("cpu", wake=woken.set)
    turns.open()
    ran: list[str] = []
    side = Side(turns, on_thread(ran, 4))
    assert woken.wait(30)
    turns.close()
    assert side.returned.wait(30) and side.result == 4 and ran == ["side"] and turns.taken == 0


def test_a_graph_set_with_turns_runs_its_steps_in_them() -> None:
    """GraphSet.turns (set after capture): off CUDA its eager steps run in the loop's turns, their outputs returned."""
    graphs: GraphSet[int] = GraphSet("cpu")
    ran: list[str] = []
    graphs.capture([1, 2], lambda key: on_thread(ran, key * 10), size=float, progress=False)
    turns = graphs.turns = GpuTurns("cpu")
    turns.open()
    outs: list[object] = []
    side = threading.Thread(target=lambda: outs.extend([graphs(1), graphs(2)]), name="side", daemon=True)
    side.start()
    while turns.taken < 2:
        turns.run_pending()
    side.join(30)
    assert outs == [10, 20] and ran == [threading.current_thread().name] * 2


@pytest.fixture
def loop_with_turns() -> Iterator[tuple[EngineLoop, GpuTurns, list[str]]]:
    """An EngineLoop over the model-free core with turns; `events` records its steps and the turns' work, in order."""
    core = EngineCore(FakeRunner(), Pool(4), SchedulerConfig(max_rows=16, max_prefill_tokens=32, urgent_s=0))
    events: list[str] = []
    step = core.step
    core.step = lambda: (events.append("step"), step())[1]  # type: ignore[method-assign]
    turns = GpuTurns("cpu")
    yield EngineLoop(core, turns=turns), turns, events


async def test_the_engine_loop_takes_turns_between_its_steps_and_hands_them_back_when_it_stops(
        loop_with_turns: tuple[EngineLoop, GpuTurns, list[str]]) -> None:
    loop, turns, events = loop_with_turns
    assert turns.wake == loop._wake.set  # a waiting turn wakes a sleeping loop
    loop.start()
    try:
        stream = loop.submit(SynthesisRequest("hi"), _request(tokens=10, budget=400, schedule=(1, 2, 4)))
        chunks = aiter(stream)
        await anext(chunks)  # the loop is stepping
        ran: list[str] = []
        side = Side(turns, lambda: (events.append("turn"), on_thread(ran, "ok")())[1])
        assert side.returned.wait(30) and side.result == "ok" and ran == ["engine-loop"]
        assert events.count("turn") == 1 and "step" in events[: events.index("turn")]
        async for _ in chunks:  # the stream goes on to its end after the turn
            pass
    finally:
        await loop.stop()
    ran = []
    side = Side(turns, on_thread(ran))
    assert side.returned.wait(30) and ran == ["side"]  # stopped: the side thread's own


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_cuda_a_turn_comes_after_the_loops_kernels_before_it_and_before_those_after_it() -> None:
    """The loop's stream writes a value behind a long kernel, a turn's work on the side thread's own stream adds to
    it, the loop's next kernel doubles it: the result is (x + 1) * 2 only if both orders hold (each side sleeps on
    the GPU first, so a missing wait would read or write too early)."""
    device = torch.device("cuda")
    turns = GpuTurns(device)
    turns.open()
    x = torch.zeros(1, device=device)
    side_stream = torch.cuda.Stream(device)

    def add_one() -> None:
        torch.cuda._sleep(50_000_000)
        x.add_(1)

    def side() -> None:
        with torch.cuda.stream(side_stream):
            turns.take(add_one)

    for trial in range(3):
        torch.cuda._sleep(50_000_000)
        x.fill_(trial)
        worker = threading.Thread(target=side, daemon=True)
        worker.start()
        while turns.run_pending() == 0:
            pass
        worker.join(30)
        x.mul_(2)
        assert x.item() == (trial + 1) * 2

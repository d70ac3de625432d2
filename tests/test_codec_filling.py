"""ChunkAssembler._filled (engine/chunks.py): a codec call that would be mostly padding waits for more pieces,
except the pieces that cannot wait. Against the plain policy (every due piece in every step's call, codec_fill = false)
on random closed-loop workloads: the same frames reach every listener, no first chunk comes a step later, and the
calls cost fewer padded rows."""

from __future__ import annotations

import random

import pytest
from engine_core_support import FakeRunner, Pool
from engine_core_support import make_request as _request
from voxgate.engine import chunks
from voxgate.engine.core import EngineCore
from voxgate.engine.request import Request, Status
from voxgate.engine.scheduler import SchedulerConfig

BUCKETS = tuple((rows, 4) for rows in (1, 8, 16, 32, 64))  # the qwen3tts default at codec_width 4


def _workload(seed: int, fill: bool) -> tuple[dict, list, list[Request]]:
    """Streams joining over time; returns per stream (first-chunk step, frames delivered), the codec calls, the
    requests."""
    rng = random.Random(seed)
    streams = rng.choice([3, 12, 40, 90])
    runner = FakeRunner(buckets=BUCKETS)
    core = EngineCore(runner, Pool(streams + 1), SchedulerConfig(max_rows=64, max_prefill_tokens=256,
                                                                 max_prefills=4, urgent_s=0), codec_fill=fill)
    joins = sorted(rng.randrange(0, 60) for _ in range(streams))
    requests = [_request(tokens=rng.randrange(5, 40), budget=rng.randrange(6, 70), schedule=(1, 2, 4, 8, 16))
                for _ in joins]
    index = {r.request_id: i for i, r in enumerate(requests)}
    first: dict[int, int] = {}
    delivered = dict.fromkeys(range(streams), 0)
    step = 0
    while step < 3000 and (core.has_work or any(j >= step for j in joins)):
        for r, j in zip(requests, joins, strict=True):
            if j == step:
                core.add(r)
        out = core.step()
        for r, pcm in out.handed_early + out.chunks:
            first.setdefault(index[r.request_id], step)
            delivered[index[r.request_id]] += len(pcm) // 1920
        step += 1
    assert not core.has_work
    return {i: (first.get(i), delivered[i]) for i in delivered}, runner.chunks.calls, requests


@pytest.mark.parametrize("seed", range(24))
def test_filling_the_codec_calls_changes_no_audio_and_costs_fewer_rows(seed: int) -> None:
    plain, plain_calls, _ = _workload(seed, False)
    filled, filled_calls, requests = _workload(seed, True)
    assert all(r.status is Status.FINISHED and r.num_decoded == r.num_frames == r.frame_budget for r in requests)
    assert filled == plain  # every frame delivered, each first chunk in the same step

    def padded_rows(calls: list) -> int:  # the calls' cost in rows' worth
        return sum(chunks.CALL_ROWS + next(b for b in BUCKETS if b[0] >= len(call))[0] for call in calls)

    assert padded_rows(filled_calls) <= padded_rows(plain_calls)
    assert len(filled_calls) <= len(plain_calls)
    if len(requests) >= 40:  # enough streams for calls of many rows: the filling must show
        assert padded_rows(filled_calls) < 0.95 * padded_rows(plain_calls), (padded_rows(filled_calls),
                                                                             padded_rows(plain_calls))


def test_a_measured_cost_table_decides_how_many_pieces_go() -> None:
    """Ten of forty playing streams due a piece of 4 frames. The row model takes a full 8-row call and leaves two.
    Where the 16-row call was timed barely dearer than the 8-row one, ten in it is the cheaper call per piece but
    not 3/4 full, so nothing goes yet; with one first chunk among them, or one listener with little audio left
    (neither can wait), all ten go."""
    from voxgate.engine.chunks import ChunkAssembler
    from voxgate.engine.scheduler import Scheduler

    def taken(costs: dict[tuple[int, int], float], first_chunk: bool = False, short: bool = False) -> int:
        calls = FakeRunner(buckets=BUCKETS).chunks
        calls.costs = costs
        scheduler = Scheduler(SchedulerConfig(urgent_s=0), Pool(41))
        scheduler.running = [_request() for _ in range(40)]
        for r in scheduler.running:
            r.first_audio_at, r.num_delivered = scheduler.clock(), 100  # playing, 8 s of audio ahead
        if first_chunk:
            scheduler.running[3].first_audio_at = None
        if short:  # its listener has 0.4 s left: less than WAIT_SLACK_S
            scheduler.running[5].num_delivered = 5
        pieces = [(r, 4, True) for r in scheduler.running[:10]]
        return len(ChunkAssembler(calls, scheduler)._filled(pieces))

    h200 = {(1, 4): 0.95, (8, 4): 1.28, (16, 4): 1.79, (32, 4): 2.83, (64, 4): 4.90}
    assert taken({}) == taken(h200) == 8
    cheap16 = {**h200, (16, 4): 1.30}
    assert taken(cheap16) == 0
    assert taken(cheap16, first_chunk=True) == 10 and taken({}, first_chunk=True) == 8
    assert taken(cheap16, short=True) == 10  # a listener near its end cannot wait either

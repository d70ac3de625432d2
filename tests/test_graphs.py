"""GraphSet: buckets run eagerly off CUDA; on CUDA two sets replayed at once on two streams (the decode step and the
codec call beside it) give what each gives alone, which needs a capture stream per set (engine/graphs.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from voxgate.engine.graphs import GraphSet, bucket_ladder, smallest_bucket


def test_eager_set_runs_each_bucket_and_picks_the_smallest() -> None:
    calls: list[int] = []
    graphs: GraphSet[int] = GraphSet("cpu")
    graphs.capture([4, 1, 2], lambda b: (lambda: calls.append(b) or b), size=float, progress=False)
    assert not graphs.use_graphs and graphs(2) == 2 and calls == [2]
    assert smallest_bucket([1, 2, 4], 3) == 4
    with pytest.raises(ValueError):
        smallest_bucket([1, 2, 4], 5)


def _gemms(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor, n: int):
    """A chain of small-M, large-K matmuls (the shapes cuBLAS splits over K through its workspace)."""
    def run() -> torch.Tensor:
        y = x
        for _ in range(n):
            y = torch.tanh(y @ w)
        out.copy_(y)
        return out
    return run


@pytest.mark.parametrize(("most", "steps", "least"), [(1, 1, 1), (256, 1, 1), (256, 2, 1), (256, 4, 1), (8192, 4, 64),
                                                      (64, 8, 1), (4096, 8, 64)])
def test_a_bucket_ladder_pads_a_call_by_at_most_one_step(most: int, steps: int, least: int) -> None:
    """Every call from `least` to `most` finds a bucket no larger than n (1 + 1/steps), checked against each n,
    and the ladder is the powers of two at one step, strictly growing, from least to most."""
    ladder = bucket_ladder(most, steps, least)
    assert ladder[0] == least and ladder[-1] == most and list(ladder) == sorted(set(ladder))
    for n in range(least, most + 1):
        assert n <= smallest_bucket(ladder, n) <= n * (1 + 1 / steps), n
    if steps == 1:
        assert ladder == tuple(least << i for i in range(len(ladder)))
    assert set(bucket_ladder(most, 1, least)) <= set(ladder)  # more steps only add buckets


@pytest.mark.parametrize(("most", "steps", "least"), [(48, 1, 1), (64, 3, 1), (64, 2, 96), (64, 0, 1)])
def test_a_bucket_ladder_refuses_what_is_not_powers_of_two(most: int, steps: int, least: int) -> None:
    with pytest.raises(ValueError, match="bucket ladder"):
        bucket_ladder(most, steps, least)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (graphs on two streams)")
def test_two_sets_replayed_at_once_on_two_streams_equal_each_alone() -> None:
    torch.manual_seed(0)
    dev = torch.device("cuda")
    sets, runs, want = [], [], []
    for _ in range(2):
        x = torch.randn(8, 4096, device=dev) / 64
        w = torch.randn(4096, 4096, device=dev) / 64
        out = torch.empty(8, 4096, device=dev)
        fn = _gemms(x, w, out, 24)
        want.append(fn().clone())
        graphs: GraphSet[int] = GraphSet(dev)
        graphs.capture([0], lambda _, fn=fn: fn, size=float, progress=False)
        sets.append(graphs)
        runs.append(out)
    side = torch.cuda.Stream(dev)
    worst = 0.0
    for _ in range(50):
        side.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(side):
            sets[1](0)
        sets[0](0)
        torch.cuda.current_stream(dev).wait_stream(side)
        torch.cuda.synchronize()
        worst = max(worst, *(float((r - w).abs().max()) for r, w in zip(runs, want, strict=True)))
    if os.environ.get("VOXGATE_GPU_RESULTS"):
        Path(os.environ["VOXGATE_GPU_RESULTS"], "graphs_two_streams.json").write_text(json.dumps({"worst": worst}))
    assert worst < 1e-5, worst

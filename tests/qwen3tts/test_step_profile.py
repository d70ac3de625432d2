"""The step profiler's arithmetic (engine/qwen3tts/bench/step_profile.py): trace parsing, busy time as the union
of kernel intervals, idle gaps, and the weight bytes a decode frame reads. The trace itself needs CUDA (H200 runs)."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from voxgate.engine.qwen3tts.bench.step_profile import _kernels, summarize, weight_bytes_per_frame


def _busy_by_grid(kernels: list[tuple[float, float, str]]) -> float:
    """Busy microseconds counted on a 1-us grid: the plain reference for the interval union."""
    covered: set[int] = set()
    for start, dur, _ in kernels:
        covered.update(range(int(start), int(start + dur)))
    return float(len(covered))


def test_busy_time_is_the_union_of_kernel_intervals_on_random_traces() -> None:
    rng = random.Random(7)
    for _ in range(50):
        kernels = sorted((float(rng.randrange(0, 400)), float(rng.randrange(1, 30)), rng.choice("abc"))
                         for _ in range(rng.randrange(1, 40)))
        row = summarize(kernels)
        span = max(s + d for s, d, _ in kernels) - kernels[0][0]
        assert row["launches"] == len(kernels)
        assert row["busy_us"] == _busy_by_grid(kernels)
        assert row["span_us"] == span
        assert row["gaps_us"] == span - row["busy_us"]
        assert sum(v["count"] for v in row["by_name"].values()) == len(kernels)


def test_a_gap_between_two_kernels_is_measured() -> None:
    row = summarize([(0.0, 5.0, "gemm"), (3.0, 4.0, "norm"), (12.0, 2.0, "gemm")])
    assert (row["busy_us"], row["span_us"], row["gaps_us"], row["max_gap_us"]) == (9.0, 14.0, 5.0, 5.0)
    assert row["by_name"]["gemm"] == {"count": 2, "total_us": 7.0}


def test_the_trace_keeps_gpu_work_and_drops_host_events() -> None:
    trace = {"traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "k2", "ts": 20, "dur": 3},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "ts": 1, "dur": 9},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "ts": 10, "dur": 1},
        {"ph": "X", "cat": "kernel", "name": "k1", "ts": 12, "dur": 2},
        {"ph": "i", "cat": "kernel", "name": "marker", "ts": 5},
    ]}
    assert _kernels(trace) == [(10.0, 1.0, "Memcpy HtoD"), (12.0, 2.0, "k1"), (20.0, 3.0, "k2")]


def test_weight_bytes_count_the_predictor_layers_once_per_depth_pass(ours: Callable[[str], Any]) -> None:
    model = ours("cv06")
    talker, predictor = model.talker, model.talker.code_predictor
    w = weight_bytes_per_frame(model)

    def nbytes(params: Any) -> int:
        return sum(p.numel() * p.element_size() for p in params)

    skip = {id(p) for m in (talker.model.codec_embedding, talker.model.text_embedding, predictor)
            for p in m.parameters()}
    assert w["talker"] == nbytes(p for p in talker.parameters() if id(p) not in skip)
    layers = nbytes(p for name, p in predictor.model.named_parameters() if not name.startswith("codec_embedding"))
    assert w["passes"] == predictor.num_code_groups - 1 == 15
    assert w["predictor"] == layers * 15 + nbytes(predictor.lm_head.parameters())

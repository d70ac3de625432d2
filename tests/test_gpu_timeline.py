"""engine/gpu_timeline.py: the interval arithmetic against a grid reference on random intervals, and the window's
bookkeeping (opened after START steps, closed after COUNT, written out) with CUDA's events stood in for by host-clock
stamps, since CI has no GPU (tests/qwen3tts/test_gpu_loop.py runs the real one)."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pytest
from voxgate.engine.core import StepOutput
from voxgate.engine.gpu_timeline import GpuTimeline, attribute, gaps, merged, overlap_length, summarize, union_length

GRID = 120


def _cells(intervals: list[tuple[float, float]]) -> set[int]:
    """The reference: unit cells [i, i+1) an interval of whole numbers covers."""
    return {i for lo, hi in intervals for i in range(int(lo), int(hi))}


def _random_intervals(rng: random.Random, n: int) -> list[tuple[float, float]]:
    out = []
    for _ in range(n):
        lo = rng.randrange(GRID)
        out.append((float(lo), float(min(GRID, lo + rng.randrange(0, 25)))))
    return out


@pytest.mark.parametrize("seed", range(200))
def test_interval_arithmetic_equals_the_grid_reference(seed: int) -> None:
    rng = random.Random(seed)
    a, b = _random_intervals(rng, rng.randrange(0, 12)), _random_intervals(rng, rng.randrange(0, 12))
    ca, cb = _cells(a), _cells(b)
    assert union_length(a) == len(ca)
    assert overlap_length(a, b) == len(ca & cb)
    assert _cells(merged(a)) == ca and all(x[1] < y[0] for x, y in zip(merged(a), merged(a)[1:], strict=False))
    lo, hi = sorted(rng.sample(range(GRID + 1), 2))
    assert _cells(gaps(a, lo, hi)) == set(range(lo, hi)) - ca
    stages, at = [], 0
    while at < GRID:  # disjoint host stages over part of the grid
        width = rng.randrange(1, 15)
        if rng.random() < 0.7:
            stages.append((rng.choice("xyz"), float(at), float(min(GRID, at + width))))
        at += width
    spent = attribute(a, stages)
    for name in "xyz":
        assert spent.get(name, 0.0) == len(ca & _cells([(s, e) for n, s, e in stages if n == name])), name
    assert spent.get("between", 0.0) == len(ca - _cells([(s, e) for _, s, e in stages]))


def test_the_summary_of_a_known_window() -> None:
    # three steps 0-4, 5-9, 12-16 ms; codec 3-7 and 9-13; the host was in `post` 9-11 and `launch` 11-12
    spans = [("step", "8+0", 0.0, 4.0), ("step", "8+0", 5.0, 9.0), ("step", "8+64", 12.0, 16.0),
             ("codec", "8x4", 3.0, 7.0), ("codec", "8x4", 9.0, 13.0)]
    s = summarize(spans, [("post", 9.0, 11.0), ("launch", 11.0, 12.0)], [8, 8, 8], 24)
    assert s["steps"] == 3 and s["wall_ms"] == 16.0 and s["period_ms"] == 8.0
    assert s["step_busy_ms"] == 12.0 and s["codec_busy_ms"] == 8.0 and s["overlap_ms"] == 4.0
    assert s["step_idle_ms"] == 4.0 and s["idle_by_host_stage_ms"] == {"between": 1.0, "post": 2.0, "launch": 1.0}
    assert s["gpu_busy_pct"] == pytest.approx(100 * 16 / 16)
    assert s["spans_ms"]["step 8+0"] == {"n": 2, "mean": 4.0, "max": 4.0}


class _HostEvent:
    """torch.cuda.Event's timing on the host clock (no GPU in CI)."""

    def __init__(self, enable_timing: bool = False) -> None:
        self.at = 0.0

    def record(self, stream: object = None) -> None:
        self.at = time.perf_counter()

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end: _HostEvent) -> float:
        return (end.at - self.at) * 1000


def test_the_window_opens_after_start_steps_and_writes_count_steps(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "Event", _HostEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    timeline = GpuTimeline.parse(f"{tmp_path / 'tl'}:3:4")
    assert timeline is not None and GpuTimeline.parse(None) is None and GpuTimeline.parse("") is None
    recorded = 0
    for step in range(12):
        started = time.perf_counter()
        if timeline.active:
            recorded += 1
            timeline.begin("step")
            time.sleep(0.002)
            timeline.end("step", "8+0")
            timeline.begin("codec", "side")
            timeline.end("codec", "8x4", "side")
        time.sleep(0.001)  # the host between steps: the step stream idles
        out = StepOutput(num_rows=8, num_frames=8, started_at=started,
                         stages={"schedule": 0.0005, "launch": 0.0025, "gpu": 0.0005})
        timeline.after_step(out)
        timeline.after_step(StepOutput(idle=True))  # idle steps are not counted
        assert timeline.active == (3 <= step + 1 < 7), step
    assert recorded == 4 and timeline.done
    data = json.loads((tmp_path / "tl" / "timeline.json").read_text())
    assert data["summary"]["steps"] == 4 and data["summary"]["codec_calls"] == 4
    assert data["summary"]["step_idle_ms"] > 0 and len(data["stages"]) == 12
    assert "# GPU timeline of the engine loop" in (tmp_path / "tl" / "timeline.md").read_text()


def test_a_bad_window_is_refused() -> None:
    with pytest.raises(ValueError, match="START >= 0 and COUNT >= 1"):
        GpuTimeline.parse("/tmp/x:5:0")


@pytest.mark.parametrize("spec", ["/tmp/x:abc", "/tmp/x:1:2:3", ":1:2"])
def test_a_malformed_window_is_refused_with_its_shape_before_anything_loads(spec: str) -> None:
    from voxgate.engine.qwen3tts.options import parse

    with pytest.raises(ValueError, match=r"gpu_timeline is DIR\[:START\[:COUNT\]\]"):
        parse({"model": "m", "gpu_timeline": spec})
    assert parse({"model": "m", "gpu_timeline": "/tmp/x:5:9"}).gpu_timeline == "/tmp/x:5:9"

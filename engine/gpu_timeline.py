"""GpuTimeline: where the GPU's time goes inside the running engine loop, over a window of its steps.

`voxgate bench steps` times each captured step alone. In the loop a step shares the GPU with the codec call of the
step before (on a CUDA stream of its own) and waits for the host between steps, which that bench cannot see. For
COUNT steps after the first START, CUDA events bracket every decode step (its input upload and replay) and every
codec call on their streams, and the worker's stages (engine/core.py `_Clock`) are stamped on the host clock; one
synchronize at each end of the window puts both on one clock (to ~10 us). The summary says how busy the GPU was, how
much the two streams overlapped, and what the host was doing while the step stream sat idle.

qwen3tts engine option `gpu_timeline=DIR:START:COUNT`; off by default (nothing is recorded, one attribute test per
step and codec call). The interval arithmetic is plain functions, tested against a grid reference.
"""

from __future__ import annotations

import json
import logging
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger("voxgate.engine.timeline")
Interval = tuple[float, float]  # (start, end), ms on the window's clock


def union_length(intervals: list[Interval]) -> float:
    """The length covered by at least one interval."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end <= reach:
            continue
        total += end - max(start, reach)
        reach = end
    return total


def merged(intervals: list[Interval]) -> list[Interval]:
    """The union as disjoint intervals, in order."""
    out: list[Interval] = []
    for start, end in sorted(intervals):
        if end <= start:
            continue
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def overlap_length(a: list[Interval], b: list[Interval]) -> float:
    """The length covered by both a and b."""
    ua, ub = merged(a), merged(b)
    total, i, j = 0.0, 0, 0
    while i < len(ua) and j < len(ub):
        lo, hi = max(ua[i][0], ub[j][0]), min(ua[i][1], ub[j][1])
        total += max(0.0, hi - lo)
        if ua[i][1] < ub[j][1]:
            i += 1
        else:
            j += 1
    return total


def gaps(intervals: list[Interval], start: float, end: float) -> list[Interval]:
    """The parts of [start, end] no interval covers."""
    out, at = [], start
    for lo, hi in merged(intervals):
        if lo > at:
            out.append((at, min(lo, end)))
        at = max(at, hi)
        if at >= end:
            break
    if at < end:
        out.append((at, end))
    return [(lo, hi) for lo, hi in out if hi > lo]


def attribute(idle: list[Interval], stages: list[tuple[str, float, float]]) -> dict[str, float]:
    """How much of the idle time fell in each host stage (stages: (name, start, end), disjoint); the rest is
    `between` (the worker outside a step: hand-over, the forecaster, an idle wait)."""
    spent: dict[str, float] = defaultdict(float)
    covered = 0.0
    for name, lo, hi in stages:
        ov = overlap_length(idle, [(lo, hi)])
        if ov:
            spent[name] += ov
            covered += ov
    rest = union_length(idle) - covered
    if rest > 1e-9:
        spent["between"] += rest
    return dict(spent)


@dataclass
class _Window:
    origin: Any  # the CUDA event every span is timed from
    host0: float  # perf_counter at the origin
    spans: list[tuple[str, str, Any, Any]] = field(default_factory=list)  # (kind, label, begin event, end event)
    stages: list[tuple[str, float, float]] = field(default_factory=list)  # host stages, ms from the origin
    rows: list[int] = field(default_factory=list)
    frames: int = 0


class GpuTimeline:
    """Records one window of the loop's steps (see the module's doc); `active` while it records."""

    def __init__(self, out_dir: str | Path, start: int = 300, count: int = 60) -> None:
        if start < 0 or count < 1:
            raise ValueError("gpu_timeline needs START >= 0 and COUNT >= 1")
        self.out_dir, self.start, self.count = Path(out_dir), start, count
        self.active = False
        self.done = False
        self._steps = 0
        self._open: dict[str, Any] = {}
        self._window: _Window | None = None

    @classmethod
    def parse(cls, spec: str | None) -> GpuTimeline | None:
        """DIR, DIR:START or DIR:START:COUNT; None or '' is off."""
        if not spec:
            return None
        parts = spec.split(":")
        try:
            numbers = [int(p) for p in parts[1:3]]
        except ValueError:
            raise ValueError(f"gpu_timeline is DIR[:START[:COUNT]] with whole numbers, not {spec!r}") from None
        if len(parts) > 3 or not parts[0]:
            raise ValueError(f"gpu_timeline is DIR[:START[:COUNT]], not {spec!r}")
        return cls(parts[0], *numbers)

    # -- on the worker, inside a step ----------------------------------------------------------------------------
    def begin(self, kind: str, stream: Any = None) -> None:
        import torch

        event = torch.cuda.Event(enable_timing=True)
        event.record(stream)
        self._open[kind] = event

    def end(self, kind: str, label: str, stream: Any = None) -> None:
        import torch

        event = torch.cuda.Event(enable_timing=True)
        event.record(stream)
        assert self._window is not None
        self._window.spans.append((kind, label, self._open.pop(kind), event))

    # -- on the worker, after each step --------------------------------------------------------------------------
    def after_step(self, out: Any) -> None:
        """`out` is the step's StepOutput (its `started_at` and `stages`)."""
        if self.done or out.idle:
            return
        self._steps += 1
        window = self._window
        if window is not None:
            at = (out.started_at - window.host0) * 1000
            for stage, seconds in out.stages.items():
                window.stages.append((stage, at, at + seconds * 1000))
                at += seconds * 1000
            window.rows.append(out.num_rows)
            window.frames += out.num_frames
            if len(window.rows) >= self.count:
                self._close()
        elif self._steps >= self.start:
            self._open_window()

    def _open_window(self) -> None:
        import torch

        torch.cuda.synchronize()
        origin = torch.cuda.Event(enable_timing=True)
        origin.record()
        origin.synchronize()
        self._window = _Window(origin, time.perf_counter())
        self.active = True

    def _close(self) -> None:
        import torch

        self.active = False
        self.done = True
        torch.cuda.synchronize()
        window, self._window = self._window, None
        assert window is not None
        spans = [(kind, label, window.origin.elapsed_time(b), window.origin.elapsed_time(e))
                 for kind, label, b, e in window.spans]
        try:
            summary = summarize(spans, window.stages, window.rows, window.frames)
            self.out_dir.mkdir(parents=True, exist_ok=True)
            (self.out_dir / "timeline.json").write_text(json.dumps(
                {"summary": summary, "spans": spans, "stages": window.stages}, indent=1))
            (self.out_dir / "timeline.md").write_text(render(summary))
            log.info("gpu timeline: %d steps, GPU busy %.1f %%, step stream idle %.2f ms a step -> %s",
                     summary["steps"], summary["gpu_busy_pct"], summary["step_idle_ms_per_step"], self.out_dir)
        except OSError as exc:
            log.error("gpu timeline: cannot write %s: %s", self.out_dir, exc)


def summarize(spans: list[tuple[str, str, float, float]], stages: list[tuple[str, float, float]],
              rows: list[int], frames: int) -> dict[str, Any]:
    """The window's numbers from its spans (kind, label, start ms, end ms) and host stages (name, start, end)."""
    steps = [(b, e) for kind, _, b, e in spans if kind == "step"]
    codec = [(b, e) for kind, _, b, e in spans if kind == "codec"]
    if not steps:
        return {"steps": 0, "gpu_busy_pct": 0.0, "step_idle_ms_per_step": 0.0}
    lo, hi = min(b for b, _ in steps), max(e for _, e in steps)
    wall = hi - lo
    n = len(steps)
    clip = [(max(b, lo), min(e, hi)) for b, e in codec if e > lo and b < hi]
    idle = gaps(steps, lo, hi)
    by_bucket: dict[str, list[float]] = defaultdict(list)
    for kind, label, b, e in spans:
        by_bucket[f"{kind} {label}"].append(e - b)
    return {
        "steps": n, "wall_ms": wall, "period_ms": wall / (n - 1) if n > 1 else wall,
        "mean_rows": sum(rows) / len(rows) if rows else 0.0, "frames": frames,
        "gpu_busy_pct": 100 * union_length(steps + clip) / wall if wall else 0.0,
        "step_busy_ms": union_length(steps), "codec_busy_ms": union_length(clip), "codec_calls": len(codec),
        "overlap_ms": overlap_length(steps, clip),
        "step_idle_ms": union_length(idle), "step_idle_ms_per_step": union_length(idle) / n,
        "idle_over_50us": sum(1 for a, b in idle if b - a > 0.05),
        "idle_by_host_stage_ms": attribute(idle, stages),
        "spans_ms": {k: {"n": len(v), "mean": sum(v) / len(v), "max": max(v)} for k, v in sorted(by_bucket.items())},
    }


def render(s: dict[str, Any]) -> str:
    """The summary as a Markdown page."""
    if not s["steps"]:
        return "# GPU timeline\n\nNo decode step in the window.\n"
    lines = ["# GPU timeline of the engine loop", "",
             f"{s['steps']} steps over {s['wall_ms']:.1f} ms (a step every {s['period_ms']:.2f} ms), "
             f"{s['mean_rows']:.1f} rows a step on average, {s['frames']} frames.", "",
             "| measure | ms | per step |", "|---|---:|---:|"]
    n = s["steps"]
    for name, key in (("step stream busy", "step_busy_ms"), ("codec stream busy (in the window)", "codec_busy_ms"),
                      ("both at once", "overlap_ms"), ("step stream idle", "step_idle_ms")):
        lines.append(f"| {name} | {s[key]:.2f} | {s[key] / n:.3f} |")
    lines += ["", f"GPU busy (either stream): {s['gpu_busy_pct']:.1f} % of the window; "
              f"{s['idle_over_50us']} idle gaps over 50 us on the step stream.", "",
              "While the step stream was idle, the worker was in:", "", "| host stage | ms | per step |",
              "|---|---:|---:|"]
    for stage, ms in sorted(s["idle_by_host_stage_ms"].items(), key=lambda kv: -kv[1]):
        lines.append(f"| {stage} | {ms:.2f} | {ms / n:.3f} |")
    lines += ["", "| span | calls | mean ms | max ms |", "|---|---:|---:|---:|"]
    for name, v in s["spans_ms"].items():
        lines.append(f"| {name} | {v['n']} | {v['mean']:.3f} | {v['max']:.3f} |")
    return "\n".join(lines) + "\n"

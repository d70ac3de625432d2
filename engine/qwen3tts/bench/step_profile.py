"""`voxgate bench steps --profile`: a kernel-level trace of one replay of each captured step bucket.

For each bucket the captured graph is replayed under torch.profiler (CUPTI records the kernels a graph launches)
and the trace is summed into one row: kernels launched, GPU-busy time (the union of kernel intervals), the span
from the first kernel's start to the last one's end, the idle gaps inside it, and the time the step's weights take
to read at the chip's bandwidth (the floor a launch-free, bandwidth-bound step would reach). The heaviest kernels
by name come with it, so a change to the step can state its expected gain from this table before it is measured.
"""

from __future__ import annotations

import json
import tempfile
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

H200_BYTES_PER_S = 4.8e12  # HBM3e, the H200's data sheet
TRACE_REPS = 3  # replays profiled, one trace each; the median row is kept


def weight_bytes_per_frame(model: Any) -> dict[str, int]:
    """Bytes of weights one decode frame reads: the Talker's stack and heads once, the code predictor's layers once
    per depth pass (15), each of its codebook heads once. Embedding tables are left out (a step reads rows)."""
    talker, predictor = model.talker, model.talker.code_predictor

    def size(module: Any, skip: tuple[Any, ...] = ()) -> int:
        skipped = {id(p) for m in skip for p in m.parameters()}
        return sum(p.numel() * p.element_size() for p in module.parameters() if id(p) not in skipped)

    passes = predictor.num_code_groups - 1
    talker_bytes = size(talker, (talker.model.codec_embedding, talker.model.text_embedding, predictor))
    layers = size(predictor.model, (predictor.model.codec_embedding,))
    heads = size(predictor.lm_head)
    return {"talker": talker_bytes, "predictor": layers * passes + heads, "passes": passes}


def _kernels(trace: dict[str, Any]) -> list[tuple[float, float, str]]:
    """(start us, duration us, name) of every GPU kernel (and memcpy/memset) in a Chrome trace."""
    out = []
    for ev in trace.get("traceEvents", []):
        if ev.get("ph") == "X" and ev.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            out.append((float(ev["ts"]), float(ev.get("dur", 0.0)), str(ev.get("name", "?"))))
    return sorted(out)


def summarize(kernels: list[tuple[float, float, str]]) -> dict[str, Any]:
    """One replay's kernels as launches, busy time (union of intervals), span and idle gaps, in microseconds."""
    if not kernels:
        return {"launches": 0, "busy_us": 0.0, "span_us": 0.0, "gaps_us": 0.0, "max_gap_us": 0.0, "by_name": {}}
    busy, end, max_gap = 0.0, kernels[0][0], 0.0
    by_name: dict[str, list[float]] = defaultdict(list)
    for start, dur, name in kernels:
        if start > end:
            max_gap = max(max_gap, start - end)
        busy += max(0.0, start + dur - max(start, end))
        end = max(end, start + dur)
        by_name[name].append(dur)
    span = end - kernels[0][0]
    return {"launches": len(kernels), "busy_us": busy, "span_us": span, "gaps_us": span - busy,
            "max_gap_us": max_gap,
            "by_name": {n: {"count": len(d), "total_us": sum(d)} for n, d in by_name.items()}}


def profile_replay(replay: Callable[[], Any]) -> dict[str, Any]:
    """The median (by span) of TRACE_REPS profiled replays of `replay`, each traced on its own."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(TRACE_REPS):
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                replay()
                torch.cuda.synchronize()
            path = Path(tmp, f"trace{i}.json")
            prof.export_chrome_trace(str(path))
            rows.append(summarize(_kernels(json.loads(path.read_text()))))
    rows.sort(key=lambda r: r["span_us"])
    return rows[len(rows) // 2]


def profile_steps(runner: Any, fill: Callable[[tuple[int, int]], None], weights: dict[str, int],
                  top: int = 8) -> list[dict[str, Any]]:
    """One row per captured step bucket: `fill(key)` sets its inputs, then its graph is profiled."""
    floor_ms = (weights["talker"] + weights["predictor"]) / H200_BYTES_PER_S * 1000
    out = []
    for key in sorted(runner.steps.keys()):
        fill(key)
        row = profile_replay(lambda key=key: runner.steps(key))
        names = sorted(row.pop("by_name").items(), key=lambda kv: -kv[1]["total_us"])
        out.append({"rows": key[0], "prefill_tokens": key[1], **row, "floor_ms": floor_ms,
                    "top": [{"name": n[:90], **v} for n, v in names[:top]]})
    return out


def markdown(profile: list[dict[str, Any]], weights: dict[str, int]) -> list[str]:
    gb = (weights["talker"] + weights["predictor"]) / 1e9
    lines = ["", f"Kernel profile of one replay per bucket (median of {TRACE_REPS} traces). Weights read per "
             f"frame: {weights['talker'] / 1e9:.2f} GB Talker + {weights['predictor'] / 1e9:.2f} GB code "
             f"predictor ({weights['passes']} passes) = {gb:.2f} GB, "
             f"{gb * 1e9 / H200_BYTES_PER_S * 1000:.2f} ms at 4.8 TB/s.", "",
             "| rows | prompt tokens | launches | span ms | GPU-busy ms | idle gaps ms | max gap us | "
             "us per launch | floor ms |", "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for p in profile:
        per = p["span_us"] / p["launches"] if p["launches"] else 0.0
        lines.append(f"| {p['rows']} | {p['prefill_tokens']} | {p['launches']} | {p['span_us'] / 1000:.2f} | "
                     f"{p['busy_us'] / 1000:.2f} | {p['gaps_us'] / 1000:.2f} | {p['max_gap_us']:.1f} | "
                     f"{per:.2f} | {p['floor_ms']:.2f} |")
    for p in profile:
        if p["prefill_tokens"] == 0 and p["rows"] in (min(q["rows"] for q in profile), max(q["rows"] for q in profile)):
            lines += ["", f"Heaviest kernels at {p['rows']} rows (count, total us, mean us):", "",
                      "| kernel | count | total us | mean us |", "|---|---:|---:|---:|"]
            for k in p["top"]:
                lines.append(f"| `{k['name']}` | {k['count']} | {k['total_us']:.0f} | "
                             f"{k['total_us'] / k['count']:.2f} |")
    return lines


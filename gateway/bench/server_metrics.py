"""The server's side, joined to the client's: `GET /metrics` scraped before and after each phase, differenced.

Families named `voxgate_engine_*` are the engine loop's (step time by row bucket and part, GC pauses, queue waits);
the report lists the expected ones that the server did not expose.
"""

from __future__ import annotations

import math
import re
from typing import Any

# What the batched engine loop is expected to expose (any other voxgate_* family is reported too).
EXPECTED_ENGINE = {
    "voxgate_engine_step_seconds": "step time by row bucket and part (talker, depth, codec, host)",
    "voxgate_engine_gc_pause_seconds": "GC pauses",
    "voxgate_engine_queue_wait_seconds": "queue wait, admission to first step",
}

_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')

Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> tuple[Series, dict[str, str]]:
    """Prometheus text -> ({(name, labels): value}, {family: type})."""
    series: Series = {}
    types: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            parts = line.split()
            if len(parts) >= 4:
                types[parts[2]] = parts[3]
            continue
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if not m:
            continue
        labels = tuple(sorted(_LABEL.findall(m.group(3) or "")))
        try:
            series[(m.group(1), labels)] = float(m.group(4))
        except ValueError:
            continue
    return series, types


def diff(before: str | None, after: str | None) -> dict[str, Any]:
    """Per family: histograms as {labels: {count, sum, mean, p50, p90, p99}} of the phase's increments,
    counters as increments, gauges as the value after. Only `voxgate_*` families."""
    if after is None:
        return {}
    a, types = parse(after)
    b, _ = parse(before) if before else ({}, {})
    out: dict[str, Any] = {}
    for family, kind in sorted(types.items()):
        if not family.startswith("voxgate_") or family.endswith("_created"):
            continue
        if kind == "histogram":
            out[family] = {"type": kind, "series": _histograms(family, a, b)}
        elif kind == "counter":
            vals = {
                _fmt(lab): v - b.get((n, lab), 0.0) for (n, lab), v in a.items() if n in (family, family + "_total")
            }
            out[family] = {"type": kind, "series": vals}
        else:
            vals = {_fmt(lab): v for (n, lab), v in a.items() if n == family}
            out[family] = {"type": kind, "series": vals}
    return out


def absent(families: dict[str, Any]) -> list[str]:
    return [name for name in EXPECTED_ENGINE if name not in families]


def _fmt(labels: tuple[tuple[str, str], ...]) -> str:
    return ",".join(f"{k}={v}" for k, v in labels) or "-"


def _histograms(family: str, a: Series, b: Series) -> dict[str, dict[str, float | None]]:
    groups: dict[tuple[tuple[str, str], ...], list[tuple[float, float]]] = {}
    for (name, labels), value in a.items():
        if name != family + "_bucket":
            continue
        le = dict(labels).get("le", "+Inf")
        rest = tuple(kv for kv in labels if kv[0] != "le")
        groups.setdefault(rest, []).append((math.inf if le == "+Inf" else float(le), value - b.get((name, labels), 0)))
    out: dict[str, dict[str, float | None]] = {}
    for rest, buckets in groups.items():
        buckets.sort()
        count = a.get((family + "_count", rest), 0.0) - b.get((family + "_count", rest), 0.0)
        total = a.get((family + "_sum", rest), 0.0) - b.get((family + "_sum", rest), 0.0)
        if count <= 0:
            continue
        row: dict[str, float | None] = {"count": count, "sum": total, "mean": total / count}
        for q in (50, 90, 99):
            row[f"p{q}"] = _bucket_quantile(buckets, count, q / 100)
        out[_fmt(rest)] = row
    return out


def _bucket_quantile(buckets: list[tuple[float, float]], count: float, q: float) -> float | None:
    """Prometheus-style: linear inside the bucket that holds the q-th observation."""
    rank = q * count
    prev_le, prev_cum = 0.0, 0.0
    for le, cum in buckets:
        if cum >= rank:
            if math.isinf(le):
                return prev_le  # beyond the last finite bound: report the bound
            if cum == prev_cum:
                return le
            return prev_le + (le - prev_le) * (rank - prev_cum) / (cum - prev_cum)
        prev_le, prev_cum = le, cum
    return None

"""The report's first-audio timeline: per phase, each stage of the server's way to a request's first audio byte
(`voxgate_first_audio_stage_seconds`, engine/timeline.py), p50 and p99 from the phase's /metrics increments.

The stages' means add up to the mean time to the first byte written (every request has each stage once, or the
stage is absent for every request of an engine without it); their percentiles do not add up, which is why the
mean is shown beside them.
"""

from __future__ import annotations

from typing import Any

from voxgate.engine.timeline import STAGES

FAMILY = "voxgate_first_audio_stage_seconds"
HEAD = ["phase", "endpoint", "stage", "requests", "mean ms", "p50 ms", "p99 ms"]


def stage_rows(server: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(endpoint, stage, histogram summary) of one phase's server metrics, stages in their order."""
    series = (server.get(FAMILY) or {}).get("series") or {}
    rows = []
    for labels, h in series.items():
        named = dict(kv.partition("=")[::2] for kv in labels.split(","))
        rows.append((named.get("endpoint", "-"), named.get("stage", "-"), h))
    order = {stage: i for i, stage in enumerate(STAGES)}
    return sorted(rows, key=lambda row: (row[0], order.get(row[1], len(order))))


def section(phases: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """Markdown lines: one table, the phases in report order; nothing when no phase has the family."""
    lines: list[str] = []
    for label, server in phases:
        rows = stage_rows(server)
        for endpoint in dict.fromkeys(endpoint for endpoint, _, _ in rows):
            mine = [(stage, h) for e, stage, h in rows if e == endpoint]
            for stage, h in mine:
                lines.append(f"| {label} | {endpoint} | {stage} | {h['count']:.0f} | {_ms(h['mean'])} | "
                             f"{_ms(h['p50'])} | {_ms(h['p99'])} |")
            lines.append(f"| {label} | {endpoint} | **total (sum of means)** | | "
                         f"{_ms(sum(h['mean'] for _, h in mine))} | | |")
    if not lines:
        return []
    return ["### First-audio timeline (server side)", "",
            "Stage by stage from the text speakable (HTTP: the request's arrival) to the first audio byte written; a "
            "stage the engine does not have is absent and the next one covers its time.", "",
            "| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD), *lines, ""]


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.2f}"

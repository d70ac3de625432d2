"""The report: `report.json` (every sample), `report.md` (tables) and PNG plots, in one output folder."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path
from typing import Any

from . import server_metrics, timeline
from .capacity import SLO_SHARE, SLO_TOTAL_PAUSE_S, SLO_TTFA_S

SCHEMA = "voxgate.bench/1"
SLO = {
    "ttfa_ms_max": SLO_TTFA_S * 1e3,
    "total_pause_ms_below": SLO_TOTAL_PAUSE_S * 1e3,
    "capacity_share": SLO_SHARE,
    "pause_rule": "playback starts at the first chunk; each chunk adds its duration to a running deadline; a chunk "
    "arriving after the deadline is a pause of (arrival - deadline) and the deadline restarts at its arrival",
}


def absent_metrics(report: dict[str, Any]) -> list[str]:
    """Expected engine families that no phase's server metrics contained."""
    seen: set[str] = set()
    for phase in phases(report):
        seen.update(phase.get("server") or {})
    return server_metrics.absent({name: True for name in seen})


def phases(report: dict[str, Any]) -> list[dict[str, Any]]:
    out = list(report.get("closed_loop", []))
    for search in report.get("open_loop", []):
        for rate in open_rates(search):
            out += rate["seeds"]
    return out


def open_rates(search: dict[str, Any]) -> list[dict[str, Any]]:
    """An open-loop search's rates measured, then its overload phase (if it ran)."""
    overload = search.get("overload")
    return search["rates"] + ([overload] if overload and "seeds" in overload else [])


def write(report: dict[str, Any], out_dir: Path, plots: bool = True) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    report.setdefault("schema", SCHEMA)
    report["server_metrics_absent"] = absent_metrics(report)
    files = [out_dir / "report.json", out_dir / "report.md"]
    files[0].write_text(json.dumps(report, indent=1, allow_nan=False, default=str) + "\n")
    if plots:
        try:
            from .plots import write_plots  # matplotlib only when plotting
        except ImportError as exc:  # the run's numbers are worth more than its pictures
            print(f"voxgate bench: no plots ({exc}; pip install 'voxgate[bench]'); the report has every number",
                  file=sys.stderr)
        else:
            report["plots"] = [p.name for p in write_plots(report, out_dir)]
            files[0].write_text(json.dumps(report, indent=1, allow_nan=False, default=str) + "\n")
            files += [out_dir / name for name in report["plots"]]
    files[1].write_text(markdown(report))
    return files


def load(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    return json.loads(data)


def merge(paths: list[str], out_dir: Path) -> list[Path]:
    """One report from several runs of one setup: the first's metadata, every part's phases and its command."""
    reports = [load(p) for p in paths]
    merged = dict(reports[0])
    merged["parts"] = [{k: r.get(k) for k in ("name", "command", "created_utc", "commit", "profile")} for r in reports]
    merged["closed_loop"] = [p for r in reports for p in r.get("closed_loop", [])]
    merged["open_loop"] = [s for r in reports for s in r.get("open_loop", [])]
    merged["baseline"] = next((r["baseline"] for r in reports if r.get("baseline")), None)
    merged["notes"] = [n for r in reports for n in r.get("notes", [])]
    return write(merged, out_dir)


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f} %"


CLOSED_HEAD = ["workload", "c", "requests", "audio-s/s", "TTFA p50 / p90 / p99 ms", "in SLO", "pauses (requests)",
               "pause total ms", "max pause ms", "peak in flight", "client lag p99 ms"]
OPEN_HEAD = ["rate /s", "requests", "in SLO (per seed)", "goodput /s", "TTFA p50 / p90 / p99 ms", "underruns",
             "underrun total ms", "errors", "refused", "refusal answer p50 / p99 ms", "peak in flight", "audio-s/s"]


def _closed_row(p: dict[str, Any]) -> list[Any]:
    s = p["summary"]
    return [p["params"]["workload"], p["params"]["concurrency"], s["requests"], _f(p["audio_s_per_s"]), _ttfa(s),
            _pct(s["in_slo_share"]), f"{s['underruns']} ({s['requests_paused']})", _f(s["underrun_total_ms"], 1),
            _f(s["max_pause_ms"], 1), p["peak_in_flight"], _f((p.get("client_loop_lag_ms") or {}).get("p99"), 1)]


def _open_row(r: dict[str, Any]) -> list[Any]:
    s = r["summary"]
    shares = ", ".join(_pct(x) for x in r["seed_shares"])
    rate = f"{r['rate']:g}" + (f" (overload {r['factor']:g}x {r['capacity_rps']:g})" if "factor" in r else "")
    refusal = s.get("refusal_ms") or {}
    refused = f"{s['refused']} ({_pct(s['refusal_share'])})" if "refused" in s else "-"
    return [rate, s["requests"], f"{_pct(s['in_slo_share'])} ({shares})", _f(r.get("goodput_rps")), _ttfa(s),
            s["underruns"], _f(s["underrun_total_ms"], 1), s["errors"], refused,
            f"{_f(refusal.get('p50'), 1)} / {_f(refusal.get('p99'), 1)}", r["peak_in_flight"], _f(r["audio_s_per_s"])]


def _ttfa(summary: dict[str, Any]) -> str:
    t = summary["ttfa_ms"]
    return f"{_ms(t['p50'])} / {_ms(t['p90'])} / {_ms(t['p99'])}"


def _table(head: list[str], rows: list[list[Any]]) -> list[str]:
    """A Markdown table, then a blank line."""
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return [*lines, ""]


def _f(v: float | None, nd: int = 2) -> str:
    return "-" if v is None else f"{v:.{nd}f}"


def markdown(report: dict[str, Any]) -> str:
    lines = [f"# voxgate bench: {report.get('name', '')}", ""]
    for part in report.get("parts") or []:
        lines.append(f"- Part `{part.get('name')}`: `{part.get('command')}` ({part.get('created_utc')})")
    gpus = ", ".join(f"{g['name']} ({g['memory']})" for g in report.get("gpus") or []) or "none (CPU only)"
    sha = (report.get("commit") or {}).get("sha")
    changed = (report.get("commit") or {}).get("dirty_paths") or []
    dirty = f" (uncommitted changes in {', '.join(changed[:8])}{' ...' if len(changed) > 8 else ''})" if changed else ""
    server = report.get("server") or {}
    lines += [
        f"- Command: `{report.get('command', '')}`",
        f"- Commit: `{sha}`{dirty}; created {report.get('created_utc', '')}",
        f"- GPU: {gpus}; host: {(report.get('host') or {}).get('cpus')} CPUs",
        f"- Engine: `{server.get('engine')}` options `{json.dumps(server.get('engine_options') or {})}`; "
        f"cold start (process to /health 200, outside every number): {_f(server.get('cold_start_s'), 1)} s",
    ]
    for key, value in (report.get("setup") or {}).items():
        lines.append(f"- {key.replace('_', ' ').capitalize()}: `{json.dumps(value)}`")
    rule = report.get("length_rule")
    lines.append(f"- Length rule: {'`' + rule + '` (sent as `max_audio_ms`)' if rule else 'none (natural length)'}")
    plan = report.get("plan") or {}
    deflate = "on" if plan.get("deflate") else "off"
    lines.append(
        f"- Transport: {plan.get('transport')}; codec {plan.get('codec', 'pcm_s16le')}; frame {plan.get('frame_ms')} ms"
        f"{' (long: what the engine made, up to that)' if (plan.get('frame_ms') or 0) > 60 else ''}; pacing asap; "
        f"deflate {deflate}"
    )
    warm = [s["ttfa_ms"] for s in server.get("warmup_requests") or [] if s.get("ttfa_ms") is not None]
    if warm:
        lines.append(
            "- Warm-up requests before any phase (kept out of the numbers), first audio ms: "
            + ", ".join(f"{t:.0f}" for t in warm)
        )
    lines += [
        f"- SLO: first audio <= {SLO['ttfa_ms_max']:.0f} ms and total pause < "
        f"{SLO['total_pause_ms_below']:.0f} ms (listener's pause rule); capacity at >= "
        f"{SLO['capacity_share']:.0%} in SLO",
        "",
    ]
    if report.get("closed_loop"):
        lines += ["## Closed loop", "", *_table(CLOSED_HEAD, [_closed_row(p) for p in report["closed_loop"]])]
    for search in report.get("open_loop", []):
        capacity = "below the lowest rate" if search["capacity_rps"] is None else f"{search['capacity_rps']:g} req/s"
        if not search["rates"]:
            capacity = "not searched"
        lines += [f"## Open loop, {search['workload']} ({search['transport']}): capacity {capacity}", ""]
        lines += _table(OPEN_HEAD, [_open_row(r) for r in open_rates(search)])
        if (search.get("overload") or {}).get("skipped"):
            lines += [f"Overload phase not run: {search['overload']['skipped']}.", ""]
    lines += _words_section(report)
    lines += _server_section(report)
    if report.get("baseline"):
        lines += _baseline_section(report["baseline"])
    for note in report.get("notes", []):
        lines.append(f"- Note: {note}")
    if report.get("plots"):
        lines += ["", "## Plots", ""] + [f"![{p}]({p})" for p in report["plots"]]
    return "\n".join(lines) + "\n"


WORDS_HEAD = ["phase", "words timed", "after their audio", "late (lead < 0)", "lead p50 / p1 / min ms"]


def _words_section(report: dict[str, Any]) -> list[str]:
    """Word timestamps per phase (closed phases, open-loop rates pooled over seeds), when the sessions had them."""
    rows = [(_phase_label(p["params"]), p["summary"]) for p in report.get("closed_loop", [])]
    for search in report.get("open_loop", []):
        rows += [(f"open {search['workload']} r={r['rate']:g}" + (" (overload)" if "factor" in r else ""),
                  r["summary"]) for r in open_rates(search)]
    rows = [(label, s) for label, s in rows if "words_timed" in s]
    if not rows:
        return []
    lines = ["## Word timestamps", "",
             "When each word's `timestamps` event arrived against its audio: after their audio, the event came "
             "after the frame holding the word's first sample; the lead is when the listener hears that sample "
             "(playback model) less the event's arrival, negative when the word was heard before its time came.", ""]
    return lines + _table(WORDS_HEAD, [
        [label, s["words_timed"], s["words_after_audio"], s["words_late"],
         f"{_ms(s['word_lead_ms_p50'])} / {_ms(s['word_lead_ms_p1'])} / {_ms(s['word_lead_ms_min'])}"]
        for label, s in rows])


def _server_section(report: dict[str, Any]) -> list[str]:
    lines = ["## Server side", ""]
    absent = report.get("server_metrics_absent") or []
    if absent:
        lines.append(
            "Absent from `/metrics` (left empty): "
            + ", ".join(f"`{n}` ({server_metrics.EXPECTED_ENGINE[n]})" for n in absent)
            + "."
        )
        lines.append("")
    rows = []
    for p in phases(report):
        label = _phase_label(p["params"])
        for family, entry in (p.get("server") or {}).items():
            if entry["type"] != "histogram" or family == timeline.FAMILY:  # (the timeline has its own table)
                continue
            # seconds shown in ms; counts (rows, tokens per step) as they are
            scale = 1e3 if family.endswith("_seconds") else 1.0
            for labels, h in entry["series"].items():
                rows.append(
                    f"| {label} | `{family}` | {labels} | {h['count']:.0f} | {_f(h['mean'] * scale, 2)} | "
                    f"{_f(_scaled(h['p50'], scale))} | {_f(_scaled(h['p99'], scale))} |"
                )
    if rows:
        lines += ["| phase | histogram | labels | count | mean (ms for _seconds) | p50 | p99 |",
                  "|---|---|---|---|---|---|---|"]
        lines += rows
    else:
        lines.append("No server histograms were exposed.")
    return [*lines, "", *timeline.section([(_phase_label(p["params"]), p.get("server") or {}) for p in phases(report)])]


def _scaled(v: float | None, scale: float) -> float | None:
    return None if v is None else v * scale


def _phase_label(params: dict[str, Any]) -> str:
    if params["shape"] == "closed":
        return f"closed {params['workload']} c={params['concurrency']}"
    overload = f" (overload {params['overload']:g}x)" if params.get("overload") else ""
    return f"open {params['workload']} r={params['rate']:g} seed={params['seed']}{overload}"


def _baseline_section(baseline: dict[str, Any]) -> list[str]:
    lines = ["## Baseline: reference implementation (qwen-tts generate, batch 1)", ""]
    if baseline.get("error"):
        return [*lines, f"Not run: {baseline['error']}", ""]
    lines += [f"- {k}: `{json.dumps(v)}`" for k, v in baseline.items() if k not in ("runs", "summary")]
    s = baseline.get("summary") or {}
    lines += [
        "",
        "| workload | runs | audio s (median) | time to whole utterance s (median) | audio-s/s (median) |",
        "|---|---|---|---|---|",
    ]
    for name, row in s.items():
        lines.append(
            f"| {name} | {row['runs']} | {_f(row['audio_s'])} | {_f(row['wall_s'], 3)} | {_f(row['audio_s_per_s'])} |"
        )
    return [*lines, ""]

"""PNG plots of a report (matplotlib, Agg): first audio and in-SLO share by rate, audio-s/s by concurrency, pauses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from .capacity import SLO_SHARE, SLO_TTFA_S
from .report import phases


def write_plots(report: dict[str, Any], out_dir: Path) -> list[Path]:
    paths = [
        _ttfa_by_rate(report, out_dir / "ttfa_by_rate.png"),
        _slo_by_rate(report, out_dir / "slo_share_by_rate.png"),
        _throughput_by_concurrency(report, out_dir / "audio_s_per_s_by_concurrency.png"),
        _pause_histogram(report, out_dir / "pause_histogram.png"),
    ]
    return [p for p in paths if p is not None]


def _empty(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="0.4")


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _ttfa_by_rate(report: dict[str, Any], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7, 4.2))
    searches = report.get("open_loop", [])
    for search in searches:
        rates = [r["rate"] for r in search["rates"]]
        for q, style in (("p50", "-o"), ("p90", "--s"), ("p99", ":^")):
            ys = [r["summary"]["ttfa_ms"][q] for r in search["rates"]]
            ax.plot(
                rates,
                [float("nan") if y is None else y for y in ys],
                style,
                label=f"{search['workload']} {search['transport']} {q}",
            )
    ax.axhline(SLO_TTFA_S * 1e3, color="red", lw=1, label="SLO 200 ms")
    ax.set(xlabel="arrival rate (requests/s)", ylabel="first audio (ms)", title="First audio by open-loop rate")
    if searches:
        ax.set_yscale("log")
        ax.legend(fontsize=7)
    else:
        _empty(ax, "no open-loop phases")
    return _save(fig, path)


def _slo_by_rate(report: dict[str, Any], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7, 4.2))
    searches = report.get("open_loop", [])
    for search in searches:
        rates = [r["rate"] for r in search["rates"]]
        shares = [100 * (r["summary"]["in_slo_share"] or 0) for r in search["rates"]]
        (line,) = ax.plot(rates, shares, "-o", label=f"{search['workload']} {search['transport']}")
        if search["capacity_rps"] is not None:
            ax.axvline(
                search["capacity_rps"],
                color=line.get_color(),
                ls=":",
                lw=1,
                label=f"capacity {search['capacity_rps']:g}/s",
            )
    ax.axhline(100 * SLO_SHARE, color="red", lw=1, label="90 %")
    ax.set(
        xlabel="arrival rate (requests/s)",
        ylabel="requests in SLO (%)",
        ylim=(0, 102),
        title="Share in SLO (first audio <= 200 ms, total pause < 10 ms)",
    )
    if searches:
        ax.legend(fontsize=7)
    else:
        _empty(ax, "no open-loop phases")
    return _save(fig, path)


def _throughput_by_concurrency(report: dict[str, Any], path: Path) -> Path:
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(10, 4.2))
    by_workload: dict[str, list[dict[str, Any]]] = {}
    for p in report.get("closed_loop", []):
        by_workload.setdefault(f"{p['params']['workload']} {p['params']['transport']}", []).append(p)
    for label, ps in by_workload.items():
        ps = sorted(ps, key=lambda p: p["params"]["concurrency"])
        cs = [p["params"]["concurrency"] for p in ps]
        ax.plot(cs, [p["audio_s_per_s"] for p in ps], "-o", label=label)
        for q, style in (("p50", "-o"), ("p99", ":^")):
            ys = [p["summary"]["ttfa_ms"][q] for p in ps]
            ax2.plot(cs, [float("nan") if y is None else y for y in ys], style, label=f"{label} {q}")
    ax.set(xlabel="concurrency c", ylabel="audio seconds per wall second", title="Closed-loop throughput")
    ax2.axhline(SLO_TTFA_S * 1e3, color="red", lw=1, label="SLO 200 ms")
    ax2.set(xlabel="concurrency c", ylabel="first audio (ms)", title="Closed-loop first audio")
    if by_workload:
        ax.set_ylim(bottom=0)
        for a in (ax, ax2):
            a.set_xscale("log", base=2)
            a.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
            a.legend(fontsize=7)
    else:
        _empty(ax, "no closed-loop phases")
    return _save(fig, path)


def _pause_histogram(report: dict[str, Any], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7, 4.2))
    pauses = [p for ph in phases(report) for s in ph["samples"] if not s["warmup"] for p in s["pauses_ms"]]
    positive = [p for p in pauses if p > 0]
    if positive:
        lo, hi = max(min(positive), 1e-3), max(positive)
        bins = [lo * (hi / lo) ** (i / 30) for i in range(31)] if hi > lo else 10
        ax.hist(positive, bins=bins)
        ax.set_xscale("log")
        ax.axvline(10, color="red", lw=1, label="10 ms (SLO total)")
        ax.legend(fontsize=7)
    else:
        _empty(ax, "no pauses in any measured request")
    ax.set(xlabel="pause (ms)", ylabel="pauses", title=f"Pauses by the listener's rule ({len(positive)} in all)")
    return _save(fig, path)


def textrate_plot(report: dict[str, Any], path: Path) -> Path:
    """`bench textrate`: first audio against the text's words/s for each mode (log-log: the rate spans 40x), and
    the pauses heard below it."""
    fig, (ax, pauses) = plt.subplots(2, 1, figsize=(7, 5.6), sharex=True, gridspec_kw={"height_ratios": [3, 1.2]})
    modes = report.get("results", {})
    for i, (mode, points) in enumerate(modes.items()):
        wps = [p["wps"] for p in points]
        for q, style in (("p50", "-o"), ("p90", "--s")):
            ax.plot(wps, [p["ttfa_ms"][q] for p in points], style, color=f"C{i}", label=f"{mode} {q}")
        shift = 0.93 if i == 0 else 1.07  # the modes' bars side by side on the log axis
        pauses.bar([w * shift for w in wps], [p["pauses"] for p in points], width=[w * 0.1 for w in wps],
                   color=f"C{i}", label=mode)
    ax.set(ylabel="first audio from the first word (ms)", title="Text streaming: first audio by text rate")
    pauses.set(xlabel="text rate (words/s)", ylabel="pauses")
    if modes:
        ax.set_xscale("log")
        ax.set_yscale("log")
        rates = sorted({p["wps"] for points in modes.values() for p in points})
        pauses.set_xticks(rates, [f"{r:g}" for r in rates])
        pauses.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.legend(fontsize=7)
        pauses.legend(fontsize=7)
        most = max((p["pauses"] for points in modes.values() for p in points), default=0)
        pauses.set_ylim(0, max(1, most) * 1.15)  # none at all reads as an empty axis from 0, not around it
        pauses.yaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    else:
        _empty(ax, "no points")
    return _save(fig, path)

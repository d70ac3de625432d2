"""A benchmark plan run against one gateway: closed-loop phases, then the open-loop capacity search, per workload.
Each phase is joined to the server's metrics increments over it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from . import server_metrics
from .capacity import SLO_SHARE, Search, doubling_plan, rates_plan
from .client_procs import run_open_procs
from .gateway_process import get_text
from .loads import PhaseResult, Target, run_closed, run_open
from .stats import summarize
from .workload import Workload


@dataclass(slots=True)
class Plan:
    workloads: list[str] = field(default_factory=lambda: ["sentences"])
    transport: str = "ws"
    concurrencies: list[int] = field(default_factory=lambda: [1, 8, 32, 64, 128])
    closed_warmup_s: float = 5.0
    closed_duration_s: float = 30.0
    rates: list[float] = field(default_factory=list)  # measured as given; or a doubling search:
    rates_by_workload: dict[str, list[float]] = field(default_factory=dict)  # a workload's own rates, if listed
    closed_workloads: list[str] | None = None  # workloads with closed-loop phases (None: every one)
    rate_start: float | None = None
    rate_max: float | None = None
    refine: int = 2
    seeds: list[int] = field(default_factory=lambda: [1, 2])
    warmup_s: float = 10.0
    duration_s: float = 60.0
    drain_s: float = 60.0
    length_rule: bool = True
    frame_ms: int = 20
    voice: str | None = None
    deflate: bool = False
    codec: str = "pcm_s16le"
    text_wps: float | None = None  # WebSocket text word by word at this rate (an LLM agent), not all at once
    timestamps: bool = False  # WebSocket sessions with word timestamps
    timestamps_hold: bool | None = None  # session.start `timestamps_hold` with them (None: not sent)
    overload: float | None = None  # an open-loop phase at this many times the capacity, after the search
    capacity: float | None = None  # req/s that `overload` multiplies (None: the capacity the search found)
    client_procs: int = 1  # processes that offer an open-loop phase's arrivals (client_procs.py)
    stop_at: float | None = None  # time.monotonic() after which no phase starts that would not end in time
    skipped: list[str] = field(default_factory=list)  # phases left out for want of time

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "stop_at"}

    def fits(self, seconds: float, what: str) -> bool:
        if self.stop_at is None or time.monotonic() + seconds <= self.stop_at:
            return True
        self.skipped.append(what)
        return False


def phase_json(result: PhaseResult, server: dict[str, Any]) -> dict[str, Any]:
    summary = summarize(result.samples)
    return {
        "params": result.params,
        "summary": summary,
        "audio_s_per_s": result.window_audio_s / result.window_s if result.window_s else None,
        "goodput_rps": summary["in_slo"] / result.window_s if result.window_s else None,
        "window_audio_s": result.window_audio_s,
        "peak_in_flight": result.peak_in_flight,
        "client_loop_lag_ms": result.loop_lag_ms,
        "server": server,
        "samples": result.samples,
    }


async def _scraped(base_url: str, phase: Callable[[], Any]) -> tuple[PhaseResult, dict[str, Any]]:
    before = await asyncio.to_thread(get_text, base_url, "/metrics")
    result = await phase()
    after = await asyncio.to_thread(get_text, base_url, "/metrics")
    return result, server_metrics.diff(before, after)


async def run_plan(base_url: str, plan: Plan, log: Callable[[str], None] = print) -> dict[str, Any]:
    target = Target(base_url, plan.transport, plan.frame_ms, plan.voice, plan.deflate, plan.codec,
                    plan.text_wps, plan.timestamps, plan.timestamps_hold)
    await target.open()
    closed: list[dict[str, Any]] = []
    open_loop: list[dict[str, Any]] = []
    try:
        for name in plan.workloads:
            workload = Workload.load(name, plan.length_rule)
            closed_here = plan.closed_workloads is None or name in plan.closed_workloads
            for c in plan.concurrencies if closed_here else []:
                if not plan.fits(plan.closed_warmup_s + plan.closed_duration_s + 5, f"closed {workload.name} c={c}"):
                    continue
                result, server = await _scraped(
                    base_url,
                    lambda c=c, w=workload: run_closed(
                        target, w, c, plan.closed_warmup_s, plan.closed_duration_s, drain_s=plan.drain_s
                    ),
                )
                phase = phase_json(result, server)
                closed.append(phase)
                s = phase["summary"]
                log(
                    f"closed {workload.name} c={c}: {phase['audio_s_per_s']:.2f} audio-s/s, TTFA p50 "
                    f"{_ms(s['ttfa_ms']['p50'])} p99 {_ms(s['ttfa_ms']['p99'])}, in SLO {_pct(s['in_slo_share'])}, "
                    f"{s['underruns']} pauses ({s['underrun_total_ms']:.0f} ms), n={s['requests']}{_words(s)}"
                    f"{_trouble(s)}"
                )
            if plan.rates or plan.rate_start or name in plan.rates_by_workload or plan.overload:
                open_loop.append(await _search(base_url, target, workload, plan, log))
    finally:
        await target.aclose()
    return {"closed_loop": closed, "open_loop": open_loop}


async def _search(base_url: str, target: Target, workload: Workload, plan: Plan, log: Callable[[str], None]) -> Any:
    rates: dict[float, dict[str, Any]] = {}

    async def measure_rate(rate: float) -> dict[str, Any] | None:
        """Every seed at `rate`, pooled; None when it would not end in time."""
        if not plan.fits(len(plan.seeds) * (plan.warmup_s + plan.duration_s + 5), f"open {workload.name} r={rate:g}"):
            return None
        seeds = []
        for seed in plan.seeds:
            pool = min(64, int(rate * 2) + 2)  # idle sessions opened before the clock starts (more open on demand)
            if plan.client_procs > 1:  # several processes offer the load (client_procs.py)
                def phase(seed: int = seed, pool: int = pool) -> Any:
                    return asyncio.to_thread(run_open_procs, target, workload, rate, plan.warmup_s, plan.duration_s,
                                             seed, plan.drain_s, pool, plan.client_procs)
            else:
                def phase(seed: int = seed, pool: int = pool) -> Any:
                    return run_open(target, workload, rate, plan.warmup_s, plan.duration_s, seed, plan.drain_s, pool)
            result, server = await _scraped(base_url, phase)
            seeds.append(phase_json(result, server))
        pooled = summarize(s for p in seeds for s in p["samples"])
        entry = {
            "rate": rate,
            "summary": pooled,
            "goodput_rps": pooled["in_slo"] / (len(seeds) * plan.duration_s),
            "peak_in_flight": max(p["peak_in_flight"] for p in seeds),
            "audio_s_per_s": sum(p["audio_s_per_s"] or 0 for p in seeds) / len(seeds),
            "seed_shares": [p["summary"]["in_slo_share"] for p in seeds],
            "seeds": seeds,
        }
        t, r = pooled["ttfa_ms"], pooled["refusal_ms"]
        log(
            f"open {workload.name} r={rate:g}/s: in SLO {_pct(pooled['in_slo_share'])} (seeds "
            f"{', '.join(_pct(x) for x in entry['seed_shares'])}), TTFA p50 {_ms(t['p50'])} p90 {_ms(t['p90'])} "
            f"p99 {_ms(t['p99'])}, {pooled['underruns']} pauses ({pooled['underrun_total_ms']:.0f} ms), "
            f"peak in flight {entry['peak_in_flight']}, n={pooled['requests']}, goodput "
            f"{entry['goodput_rps']:.2f}/s, refused {_pct(pooled['refusal_share'])} (answered p50 {_ms(r['p50'])} "
            f"p99 {_ms(r['p99'])}), {pooled['errors']} errors{_words(pooled)}{_paced(pooled)}"
        )
        return entry

    async def measure_async(rate: float) -> float | None:
        entry = await measure_rate(rate)
        if entry is None:
            return None
        rates[rate] = entry
        return entry["summary"]["in_slo_share"] or 0.0

    listed = plan.rates_by_workload.get(workload.name) or plan.rates
    if listed:
        plan_rates = rates_plan(listed)
    elif plan.rate_start:
        plan_rates = doubling_plan(plan.rate_start, plan.rate_max or plan.rate_start * 64, plan.refine)
    else:  # only the overload phase, at a capacity given
        plan_rates = rates_plan([])
    search = Search()
    try:
        rate = next(plan_rates)
        while True:
            share = await measure_async(rate)
            if share is None:  # out of time: the search ends here, with what it has
                break
            search.shares[rate] = share
            rate = plan_rates.send(share)
    except StopIteration:
        pass
    log(f"capacity {workload.name} ({plan.transport}): {search.capacity} req/s at >= {SLO_SHARE:.0%} in SLO")
    out = {
        "workload": workload.name,
        "transport": plan.transport,
        "capacity_rps": search.capacity,
        "threshold": search.threshold,
        "search_order": list(search.shares),
        "rates": [rates[r] for r in sorted(rates)],
    }
    if plan.overload:
        out["overload"] = await _overload(plan, search.capacity, measure_rate, log)
    return out


async def _overload(plan: Plan, found: float | None, measure_rate: Callable[[float], Any],
                    log: Callable[[str], None]) -> dict[str, Any]:
    """The open-loop phase at `plan.overload` x the capacity (given, or found by the search just run)."""
    basis = plan.capacity or found
    head = {"factor": plan.overload, "capacity_rps": basis, "capacity_from": "given" if plan.capacity else "search"}
    if not basis:
        log("overload: not run, no capacity to multiply (the search found none; give --capacity)")
        return head | {"skipped": "no capacity: the search found none and no --capacity was given"}
    entry = await measure_rate(round(basis * (plan.overload or 0), 3))
    if entry is None:
        return head | {"skipped": "out of time"}
    for phase in entry["seeds"]:
        phase["params"]["overload"] = plan.overload
    return head | entry


def _words(summary: dict[str, Any]) -> str:
    """The word-timestamps clause of a phase's line (phases without them: none)."""
    if "words_timed" not in summary:
        return ""
    s = summary
    return (f", words {s['words_timed']} timed, {s['words_after_audio']} after their audio, {s['words_late']} late, "
            f"lead p50 {_ms(s['word_lead_ms_p50'])} min {_ms(s['word_lead_ms_min'])}")


def _trouble(summary: dict[str, Any]) -> str:
    """Errors (with the commonest) and the message limit's waits, where a phase had any."""
    s = summary
    errors = f", {s['errors']} errors (most: {s['error_top']}, {s['error_top_count']})" if s.get("errors") else ""
    return errors + _paced(s)


def _paced(summary: dict[str, Any]) -> str:
    s = summary
    if not s.get("requests_paced"):
        return ""
    return f", {s['requests_paced']} requests held {s['paced_s']:.1f} s in all by the message limit"


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f} ms"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f} %"

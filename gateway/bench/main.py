"""`voxgate bench run`: start or reach a gateway, warm it up, run the plan, write the report."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shlex
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import environment, stats
from .arguments import command_line, default_name, key_values
from .gateway_process import GatewayProcess, gateway_base_url, get_json
from .load_client import Trace, WsClient
from .loads import Target
from .plan_runner import Plan, run_plan
from .report import SLO, write
from .workload import LENGTH_RULE, Workload


def plan_from_args(args: argparse.Namespace) -> Plan:
    if args.timestamps and args.transport != "ws":
        raise SystemExit("--timestamps needs --transport ws (the bench's HTTP requests stream raw audio, with no room "
                         "for word times)")
    if args.timestamps_hold is not None and not args.timestamps:
        raise SystemExit("--timestamps-hold needs --timestamps")
    plan = Plan(
        workloads=args.workload or ["sentences"],
        transport=args.transport,
        concurrencies=args.concurrency,
        closed_warmup_s=args.closed_warmup,
        closed_duration_s=args.closed_duration,
        rates=args.rates,
        refine=args.refine,
        seeds=args.seeds,
        warmup_s=args.warmup,
        duration_s=args.duration,
        drain_s=args.drain,
        length_rule=not args.no_length_rule,
        frame_ms=args.frame_ms,
        voice=args.voice,
        deflate=args.deflate,
        codec=args.codec,
        text_wps=args.text_wps,
        timestamps=args.timestamps,
        timestamps_hold=hold_flag(args.timestamps_hold),
        overload=args.overload,
        capacity=args.capacity,
        client_procs=args.client_procs,
    )
    if args.rate_search:
        start, _, top = args.rate_search.partition(":")
        plan.rate_start, plan.rate_max = float(start), float(top) if top else None
    return plan


def hold_flag(value: str | None) -> bool | None:
    """`--timestamps-hold true|false` as session.start's `timestamps_hold`; None (not given): not sent."""
    return None if value is None else value == "true"


async def probe(base_url: str, plan: Plan, warmup_requests: int) -> dict[str, Any]:
    """What the server says about itself, and a few sequential requests so that no phase starts cold."""
    info: dict[str, Any] = {
        "health": await asyncio.to_thread(get_json, base_url, "/health"),
        "voices": await asyncio.to_thread(get_json, base_url, "/v1/voices"),
    }
    target = Target(base_url, plan.transport, plan.frame_ms, plan.voice, plan.deflate, plan.codec,
                    plan.text_wps, plan.timestamps, plan.timestamps_hold)
    if plan.voice is None and isinstance(info["voices"], dict):
        plan.voice = info["voices"].get("default")
        target.voice = plan.voice
    with contextlib.suppress(Exception):
        client = await WsClient.connect(target.ws_url, plan.frame_ms, plan.voice, plan.deflate, plan.codec,
                                        timestamps=plan.timestamps, timestamps_hold=plan.timestamps_hold)
        info["session"] = client.started
        await client.close()
    await target.open()
    workload = Workload.load(plan.workloads[0], plan.length_rule)
    warm: list[dict[str, Any]] = []
    try:
        client = await target.client()
        for i in range(warmup_requests):
            text = workload.texts[i % len(workload.texts)]
            trace = Trace(i, len(text.split()), workload.max_audio_ms(i), scheduled=time.perf_counter())
            await client.speak(trace, text)
            warm.append(stats.to_sample(trace, trace.scheduled, warmup=True))
        await client.close()
    finally:
        await target.aclose()
    info["warmup_requests"] = warm
    return info


async def measure(
    base_url: str, plan: Plan, warmup_requests: int, log: Callable[[str], None] = print
) -> tuple[dict[str, Any], dict[str, Any]]:
    info = await probe(base_url, plan, warmup_requests)
    return info, await run_plan(base_url, plan, log)


def build_report(
    name: str,
    plan: Plan,
    server: dict[str, Any],
    results: dict[str, Any],
    setup: dict[str, Any],
    command: list[str] | None = None,
    described: dict[str, Any] | None = None,
) -> dict[str, Any]:
    report: dict[str, Any] = {"name": name, **(described or environment.describe())}
    if command:
        report["command"] = shlex.join(command)
    report["server"] = server
    report["setup"] = setup
    report["plan"] = plan.to_json()
    report["slo"] = SLO
    report["length_rule"] = LENGTH_RULE if plan.length_rule else None
    report["workloads"] = {w: Workload.load(w, plan.length_rule).describe() for w in plan.workloads}
    report |= results
    report.setdefault("notes", [])
    if plan.skipped:
        report["notes"].append("left out for want of time: " + ", ".join(plan.skipped))
    paced = [(f"closed c={p['params']['concurrency']}", p["summary"]) for p in results.get("closed_loop", [])]
    paced += [(f"open r={r['rate']:g}/s", r["summary"]) for search in results.get("open_loop", [])
              for r in search.get("rates", [])]
    for phase, summary in paced:
        if summary.get("requests_paced"):
            report["notes"].append(
                f"{phase}: {summary['requests_paced']} of {summary['requests']} requests waited "
                f"{summary['paced_s']:.1f} s in all to keep within the session's limits.max_messages_per_s: the "
                "phase measured that limit as much as the engine")
    for phase in results.get("closed_loop", []):
        lag = (phase.get("client_loop_lag_ms") or {}).get("p99") or 0
        if lag > 20:
            report["notes"].append(
                f"client event-loop lag p99 {lag:.0f} ms in closed c={phase['params']['concurrency']}"
                ": the load generator itself was late; treat those pauses with suspicion"
            )
    return report


def headline(report: dict[str, Any]) -> list[str]:
    lines = []
    closed = report.get("closed_loop") or []
    if closed:
        best = max(closed, key=lambda p: p["audio_s_per_s"] or 0)
        c1 = next((p for p in closed if p["params"]["concurrency"] == 1), None)
        lines.append(
            f"closed loop: best {best['audio_s_per_s']:.1f} audio-s/s at c={best['params']['concurrency']}"
            + (
                f"; c=1 TTFA p50 {c1['summary']['ttfa_ms']['p50']:.0f} ms"
                if c1 and c1["summary"]["ttfa_ms"]["p50"] is not None
                else ""
            )
        )
    for search in report.get("open_loop") or []:
        lines.append(f"SLO capacity {search['workload']} ({search['transport']}): {search['capacity_rps']} req/s")
        over = search.get("overload")
        if over and "summary" in over:
            s = over["summary"]
            lines.append(f"overload {over['factor']:g}x {over['capacity_rps']:g} = {over['rate']:g} req/s: goodput "
                         f"{over['goodput_rps']:.2f} req/s, refused {s['refused']}/{s['requests']}, "
                         f"{s['errors']} errors")
    return lines


def exit_on_sigterm() -> None:
    """SIGTERM (a timeout, a kill) unwinds like Ctrl-C, so the gateway process this bench started is stopped too."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


def bench_run(args: argparse.Namespace) -> int:
    exit_on_sigterm()
    describe = environment.describe()  # the tree as it was when the run started
    stats.KEEP_TRACES = args.keep_traces
    plan = plan_from_args(args)
    if not args.url and not args.engine:
        raise SystemExit("give --url of a running gateway or --engine to start one")
    base_url = gateway_base_url(args.url) if args.url else None  # a bad --url is told before anything runs
    name = args.name or default_name(args.engine or "gateway", plan.transport)
    out_dir = Path(args.out or Path("docs/benchmarks") / name)
    out_dir.mkdir(parents=True, exist_ok=True)
    options = key_values(args.engine_option)
    setup: dict[str, Any] = {}
    if args.model_dir:
        setup["model"] = environment.checkpoint_shapes(args.model_dir)
    setup |= key_values(args.meta)
    if args.engine:
        gateway = GatewayProcess(
            args.engine, {k: str(v) for k, v in options.items()}, args.serve_arg, log_path=out_dir / "server.log"
        )
        with gateway:
            info, results = asyncio.run(measure(gateway.base_url, plan, args.warmup_requests))
        server = {
            "engine": args.engine,
            "engine_options": options,
            "cold_start_s": gateway.cold_start_s,
            "serve_command": gateway.command[2:],
            **info,
        }
    else:
        assert base_url is not None
        info, results = asyncio.run(measure(base_url, plan, args.warmup_requests))
        server = {"engine": (info.get("health") or {}).get("engine"), "url": args.url, **info}
    args.name, args.out = name, str(out_dir)  # so that the recorded command writes the same report again
    report = build_report(name, plan, server, results, setup, command_line(args), describe)
    files = write(report, out_dir, plots=not args.no_plots)
    for line in headline(report):
        print(line)
    print(f"report: {files[1]}")
    return 0

"""`voxgate bench gpu-suite`: a whole benchmark inside one GPU call (at most 10 minutes a command).

Order: make the synthetic checkpoint if asked, the baseline arm (the reference, in its own process so its GPU memory
is gone before the gateway starts), start `voxgate serve --engine qwen3tts`, warm up, run the profile's phases under
a time budget, write the report and copy at most 8 files into the output folder (what a device call returns).
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from . import environment
from .arguments import command_line, key_values
from .gateway_process import GatewayProcess
from .main import build_report, exit_on_sigterm, headline, hold_flag, measure
from .plan_runner import Plan
from .report import write


# The contract's full open loop (10 s warm-up, 60 s, two seeds: 140 s a rate) does not fit one 10-minute call with
# everything else, so "full" is split into parts that each fit; `voxgate bench merge` joins their reports.
def _capacity_search(workload: str, rate_start: float, rate_max: float) -> dict[str, Any]:
    """The full suite's open-loop capacity search for one workload: two seeds, a minute a rate, one refinement."""
    return dict(
        workloads=[workload],
        concurrencies=[],
        rate_start=rate_start,
        rate_max=rate_max,
        refine=1,
        seeds=[1, 2],
        warmup_s=10,
        duration_s=60,
        baseline_runs=0,
    )


PROFILES: dict[str, dict[str, Any]] = {
    "quick": dict(
        concurrencies=[1, 4],
        closed_warmup_s=2,
        closed_duration_s=10,
        rates=[0.5, 1.0],
        seeds=[1],
        warmup_s=3,
        duration_s=15,
        baseline_runs=3,
    ),
    "eager": dict(
        concurrencies=[1, 2, 4, 8],
        closed_warmup_s=3,
        closed_duration_s=15,
        rate_start=0.25,
        rate_max=16.0,
        refine=1,
        seeds=[1, 2],
        warmup_s=5,
        duration_s=20,
        baseline_runs=5,
    ),
    # The batched engine loop in one call (after `voxgate bench steps` tuned the kernels): closed loop at the issue's
    # concurrencies, then open loop at set rates (idle first audio at 1 req/s, then the capacity region); shorter
    # phases than the contract's, one seed: the full-* profiles are the contract.
    "loop": dict(
        frame_ms=1280,  # asap clients take what the engine made, up to a chunk (20 ms frames swamp the event loop)
        concurrencies=[1, 8, 32, 128],
        closed_warmup_s=4,
        closed_duration_s=15,
        rates=[1.0, 40.0, 80.0, 120.0, 160.0],
        seeds=[1],
        warmup_s=5,
        duration_s=15,
        baseline_runs=0,
    ),
    # Everything of the loop's report in one server's life (one cold start): sentences closed and open, passages open.
    "loop-final": dict(
        frame_ms=1280,
        workloads=["sentences", "passages"],
        closed_workloads=["sentences"],
        concurrencies=[1, 8, 32, 128],
        closed_warmup_s=3,
        closed_duration_s=12,
        rates_by_workload={"sentences": [1.0, 80.0, 100.0, 120.0], "passages": [4.0, 8.0]},
        seeds=[1],
        warmup_s=3,
        duration_s=12,
        baseline_runs=0,
    ),
    "loop-passages": dict(
        workloads=["passages"],
        concurrencies=[],
        rates=[4.0, 8.0, 16.0],
        seeds=[1],
        warmup_s=5,
        duration_s=20,
        baseline_runs=0,
    ),
    "full-closed": dict(concurrencies=[1, 8, 32, 64, 128], closed_warmup_s=5, closed_duration_s=30, baseline_runs=5),
    "full-sentences": _capacity_search("sentences", rate_start=4.0, rate_max=256.0),
    "full-passages": _capacity_search("passages", rate_start=0.5, rate_max=64.0),
}


class Log:
    def __init__(self, path: Path) -> None:
        self.file = open(path, "a", buffering=1)  # noqa: SIM115
        self.t0 = time.monotonic()

    def __call__(self, line: str) -> None:
        text = f"[{time.monotonic() - self.t0:6.1f} s] {line}"
        print(text, flush=True)
        self.file.write(text + "\n")


def make_plan(profile: str, args: argparse.Namespace, stop_at: float) -> tuple[Plan, int]:
    spec = dict(PROFILES[profile])
    baseline_runs = spec.pop("baseline_runs")
    plan = Plan(drain_s=20.0, stop_at=stop_at, **spec)
    if getattr(args, "rate_start", None):
        plan.rate_start = args.rate_start
    plan.timestamps = bool(getattr(args, "timestamps", False))
    plan.timestamps_hold = hold_flag(getattr(args, "timestamps_hold", None))
    if plan.timestamps_hold is not None and not plan.timestamps:
        raise SystemExit("--timestamps-hold needs --timestamps")
    return plan, baseline_runs


def _python_env(extra_path: str | None) -> dict[str, str]:
    env = dict(os.environ)
    if extra_path:
        env["PYTHONPATH"] = extra_path + os.pathsep + env.get("PYTHONPATH", "")
    return env


def run_baseline_process(args: argparse.Namespace, work: Path, runs: int, budget_s: float, log: Log) -> Any:
    """The reference in a child process, with `--reference-path` (its transformers 4.57.3 wheels) first."""
    cmd = [
        sys.executable,
        "-m",
        "voxgate.gateway.cli",
        "bench",
        "baseline",
        "--checkpoint",
        args.checkpoint,
        "--runs",
        str(runs),
        "--out",
        str(work / "baseline"),
    ]
    engine = key_values(args.engine_option)  # the reference runs where and how the engine runs
    if engine.get("device"):
        cmd += ["--device", str(engine["device"])]
    if engine.get("dtype"):
        cmd += ["--dtype", str(engine["dtype"])]
    log("baseline: " + " ".join(cmd))
    try:
        with open(work / "baseline.log", "wb") as out:
            subprocess.run(
                cmd,
                env=_python_env(args.reference_path),
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=budget_s,
                check=False,
            )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {budget_s:.0f} s (see baseline.log)"}
    try:
        return json.loads((work / "baseline" / "baseline.json").read_text())
    except (OSError, ValueError) as exc:
        return {"error": f"no baseline.json ({exc}); see baseline.log"}


def make_checkpoint(args: argparse.Namespace, log: Log) -> float | None:
    if Path(args.checkpoint, "config.json").exists() or not args.make_like:
        return None
    cmd = [
        sys.executable,
        "-m",
        "voxgate.gateway.cli",
        "checkpoint",
        "synth",
        "--like",
        args.make_like,
        "--out",
        args.checkpoint,
        "--device",
        "cuda",
    ]
    log("checkpoint: " + " ".join(cmd))
    t0 = time.monotonic()
    subprocess.run(cmd, check=True)
    return time.monotonic() - t0


def time_aligner(args: argparse.Namespace, work: Path, log: Log) -> dict[str, Any] | None:
    """`--aligner DIR`: the aligner's own timing (engine/aligner/bench.py, its own process, before the gateway's),
    writing a synthetic checkpoint of the official shapes into DIR first when it has none."""
    if not args.aligner:
        return None
    out = work / "aligner-bench.json"
    cmd = [sys.executable, "-m", "voxgate.engine.aligner.bench", "--checkpoint", args.aligner,
           "--write-synthetic", "full", "--batches", "1,128", "--seconds", "3", "--json", str(out)]
    log("aligner: " + " ".join(cmd))
    subprocess.run(cmd, check=True)
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def collect(work: Path, out: Path, log_path: Path) -> list[Path]:
    """At most 8 plain files, no deeper than out/: report.md, report.json.gz, the plots, the logs."""
    out.mkdir(parents=True, exist_ok=True)
    files = [work / "report.md", *sorted(work.glob("*.png"))]
    copied = [Path(shutil.copy(f, out / f.name)) for f in files if f.exists()]
    for name in ("report.json", "server.log"):
        if (work / name).exists():
            with open(work / name, "rb") as src, gzip.open(out / (name + ".gz"), "wb") as dst:
                shutil.copyfileobj(src, dst)
            copied.append(out / (name + ".gz"))
    shutil.copy(log_path, out / "suite.log")
    return [*copied, out / "suite.log"]


def suite_main(args: argparse.Namespace) -> int:
    exit_on_sigterm()
    described = environment.describe()
    started = time.monotonic()
    stop_at = started + args.budget_s
    name = args.name or f"qwen3tts-{args.profile}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"
    work = Path(tempfile.mkdtemp(prefix="voxgate-bench-")) / name
    work.mkdir(parents=True)
    log = Log(work / "suite.log")
    log(f"suite {name}: profile {args.profile}, budget {args.budget_s:.0f} s, work {work}")
    for gpu in environment.gpus():
        log(f"gpu: {gpu}")
    checkpoint_s = make_checkpoint(args, log)
    plan, baseline_runs = make_plan(args.profile, args, stop_at)
    baseline = None
    if baseline_runs and not args.skip_baseline:
        baseline = run_baseline_process(args, work, baseline_runs, min(240.0, args.budget_s / 3), log)
        log(f"baseline: {json.dumps(baseline.get('summary') or baseline.get('error'))}")
    aligner_bench = time_aligner(args, work, log)
    options = {"model": args.checkpoint, **({"aligner": args.aligner} if args.aligner else {}),
               **key_values(args.engine_option)}
    gateway = GatewayProcess(
        "qwen3tts",
        {k: str(v) for k, v in options.items()},
        args.serve_arg,
        log_path=work / "server.log",
        ready_timeout_s=300.0,
    )
    results: dict[str, Any] = {"closed_loop": [], "open_loop": []}
    info: dict[str, Any] = {}
    try:
        with gateway:
            log(f"gateway ready in {gateway.cold_start_s:.1f} s (cold start, outside every number)")
            info, results = asyncio.run(measure(gateway.base_url, plan, 4, log))
    except Exception as exc:  # still write what there is: the baseline and the reason
        log(f"gateway run failed: {type(exc).__name__}: {exc}")
        info["failure"] = f"{type(exc).__name__}: {exc}"
    setup: dict[str, Any] = {"model": environment.checkpoint_shapes(args.checkpoint)}
    engine_info = (info.get("health") or {}).get("engine_info")
    if engine_info:
        setup["engine_info"] = engine_info
    if checkpoint_s is not None:
        setup["synthetic_checkpoint_write_s"] = checkpoint_s
    setup |= key_values(args.meta)
    server = {
        "engine": "qwen3tts",
        "engine_options": options,
        "cold_start_s": gateway.cold_start_s,
        "serve_command": gateway.command[2:],
        **info,
    }
    command = command_line(args, ("voxgate", "bench", "gpu-suite"))
    report = build_report(name, plan, server, results, setup, command, described)
    report["baseline"] = baseline
    report["profile"] = args.profile
    if aligner_bench is not None:
        report["aligner_bench"] = aligner_bench
    write(report, work)
    for line in headline(report):
        log(line)
    if baseline and baseline.get("summary"):
        for w, row in baseline["summary"].items():
            log(f"baseline {w}: {row['audio_s_per_s']:.2f} audio-s/s, whole utterance {row['wall_s']:.3f} s")
    log(f"done in {time.monotonic() - started:.0f} s")
    for f in collect(work, Path(args.out), work / "suite.log"):
        print(f"wrote {f}")
    return 0 if not info.get("failure") else 1

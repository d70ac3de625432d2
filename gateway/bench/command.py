"""`voxgate bench`: `run` (against a running gateway or one it starts), `baseline` (qwen-tts reference arm),
`gpu-suite` (everything in one GPU call), `steps` (the engine loop's steps per bucket), `codec` (the incremental
codec alone: exactness, bf16 SNR, step speed), `replot` (re-render a report.json) and `merge`. No torch or
matplotlib here."""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

# suite.PROFILES, kept light (no import of the suite here)
SUITE_PROFILES = ["quick", "eager", "loop", "loop-final", "loop-passages", "full-closed", "full-sentences",
                  "full-passages"]


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    where = p.add_argument_group("gateway under test")
    where.add_argument("--url", help="a running gateway, e.g. http://127.0.0.1:8000")
    where.add_argument("--engine", help="start `voxgate serve --engine ENGINE` on a free port instead")
    where.add_argument("--engine-option", action="append", metavar="KEY=VALUE", help="passed to voxgate serve")
    where.add_argument("--serve-arg", action="append", default=[], metavar="ARG", help="extra voxgate serve argument")
    where.add_argument("--model-dir", help="checkpoint folder: its config.json shapes go into the report")
    load = p.add_argument_group("load")
    load.add_argument("--workload", action="append", help="sentences, passages or a file (repeatable)")
    load.add_argument("--transport", choices=["ws", "http"], default="ws")
    load.add_argument("--concurrency", type=_ints, default=[1, 8, 32, 64, 128], help="closed loop c list, '' for none")
    load.add_argument("--closed-warmup", type=float, default=5.0, help="s, per closed-loop phase")
    load.add_argument("--closed-duration", type=float, default=30.0, help="s, per closed-loop phase")
    load.add_argument("--rates", type=_floats, default=[], help="open-loop rates to measure, e.g. 1,2,4")
    load.add_argument("--rate-search", metavar="START:MAX", help="open loop: double from START to a failure, bisect")
    load.add_argument("--refine", type=int, default=2, help="bisection steps after the doubling")
    load.add_argument("--overload", type=float, metavar="X",
                      help="after the open loop: one more open-loop phase at X times the capacity (Poisson arrivals); "
                           "the report counts its refusals (engine_full) apart from errors, and its goodput")
    load.add_argument("--capacity", type=float, metavar="R",
                      help="req/s that --overload multiplies (default: the capacity the open-loop search found)")
    load.add_argument("--client-procs", type=int, default=1, metavar="N",
                      help="open loop: offer the arrivals from N processes (each every N-th arrival of the same "
                           "schedule); one event loop falls behind past a few hundred streamed requests a second")
    load.add_argument("--seeds", type=_ints, default=[1, 2], help="arrival seeds per rate")
    load.add_argument("--warmup", type=float, default=10.0, help="s, open-loop warm-up per rate and seed")
    load.add_argument("--duration", type=float, default=60.0, help="s, open-loop measurement per rate and seed")
    load.add_argument("--drain", type=float, default=60.0, help="s to wait for requests in flight at a phase end")
    load.add_argument("--warmup-requests", type=int, default=4, help="sequential requests before any phase")
    load.add_argument("--no-length-rule", action="store_true", help="natural length: no max_audio_ms per request")
    load.add_argument("--frame-ms", type=int, default=20,
                      help="10, 20, 40, 60, or (asap long frames) a multiple of 20 up to 1280: what the engine "
                           "made, up to that, per message")
    load.add_argument("--codec", default="pcm_s16le", choices=["pcm_s16le", "opus"])
    load.add_argument("--voice")
    load.add_argument("--text-wps", type=float, help="WebSocket: send the text one word a message at this many "
                      "words/s (an LLM's output; TTFA counts from the first word); default: all at once")
    load.add_argument("--deflate", action="store_true", help="offer WebSocket permessage-deflate (off by default)")
    load.add_argument("--timestamps", action="store_true", help="WebSocket: sessions ask for word timestamps "
                      "(`timestamps: \"word\"`); a server without them is an error; each sample counts its timed "
                      "words, those whose event came after their audio, and when each is heard against its event")
    load.add_argument("--timestamps-hold", choices=["true", "false"],
                      help="with --timestamps: session.start carries `timestamps_hold` (false: the server never holds "
                      "audio for the aligner, so an event may come after its words' audio; an engine that times words "
                      "as it speaks answers true either way); default: not sent")
    out = p.add_argument_group("report")
    out.add_argument("--name", help="report name (default ENGINE-TRANSPORT-UTCDATE)")
    out.add_argument("--out", help="output folder (default docs/benchmarks/NAME)")
    out.add_argument("--meta", action="append", metavar="KEY=VALUE", help="setup facts: precision, chunk_schedule")
    out.add_argument("--keep-traces", action="store_true", help="keep every frame's arrival in report.json")
    out.add_argument("--no-plots", action="store_true")


def add_codec_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, help="write codec_bench.json and codec_bench.md here (a folder)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--tiny", action="store_true", help="tiny codec widths (CPU dry run)")
    p.add_argument("--shared", default=None, help="shared data root (default: $VOXGATE_SHARED or <repo>/../shared)")
    p.add_argument("--frames", type=int, default=310, help="exactness utterance length (> 300)")
    p.add_argument("--utterances", type=int, default=32, help="bf16 SNR utterances")
    p.add_argument("--iters", type=int, default=30, help="timed steps per shape (median)")
    p.add_argument("--shapes", default="128x1,32x4,8x16", help="timed steps, ROWSxFRAMES, comma-separated")
    p.add_argument("--paths", default="fused,reference",
                   help="step implementations, comma-separated: fused, fused_gemv (the transformer's projections "
                        "through kernels/gemv.py: codec_gemm = gemv), reference")
    p.add_argument("--variants", default="default",
                   help="fused path, bf16: kernel variants to time, comma-separated (default, pointer, accurate_sin, "
                        "no_autotune, attn_2warps, tma_min_<rows>; join with + to combine); docs/codec.md")
    p.add_argument("--speed-only", action="store_true", help="bf16 step speeds only (no exactness, SNR, fp32)")
    p.add_argument("--watchdog", type=float, default=0, help="print every thread's stack every N s (0: off)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="bench_command", required=True)
    add_run_arguments(sub.add_parser("run", help="closed loop and open-loop SLO capacity against a gateway"))
    b = sub.add_parser("baseline", help="the reference implementation (qwen-tts 0.1.1) at batch 1, GPU")
    b.add_argument("--checkpoint", required=True, help="Qwen3-TTS checkpoint folder (synthetic weights)")
    b.add_argument("--workload", action="append", help="sentences, passages or a file (repeatable)")
    b.add_argument("--runs", type=int, default=5, help="timed utterances per workload after the warm-up")
    b.add_argument("--warmup", type=int, default=2, help="untimed utterances per workload first")
    b.add_argument("--device", default="cuda:0")
    b.add_argument("--dtype", default="bfloat16")
    b.add_argument("--out", required=True, help="write baseline.json here (a folder)")
    s = sub.add_parser("gpu-suite", help="one GPU call: baseline arm, gateway start, warm-up, runs, reports")
    s.add_argument("--checkpoint", required=True, help="Qwen3-TTS checkpoint folder (synthetic weights)")
    s.add_argument("--out", required=True, help="output folder ($OUT on the GPU machine)")
    s.add_argument("--profile", choices=SUITE_PROFILES, default="eager", help="see docs/benchmarks.md")
    s.add_argument("--engine-option", action="append", metavar="KEY=VALUE", help="extra qwen3tts engine options")
    s.add_argument("--serve-arg", action="append", default=[], metavar="ARG")
    s.add_argument("--name", help="report name (default qwen3tts-PROFILE-UTCDATE)")
    s.add_argument("--meta", action="append", metavar="KEY=VALUE")
    s.add_argument("--skip-baseline", action="store_true")
    s.add_argument("--make-like", help="write a synthetic checkpoint like this official one if --checkpoint is empty")
    s.add_argument("--reference-path", help="PYTHONPATH prefix for the baseline (qwen-tts, transformers 4.57.3)")
    s.add_argument("--rate-start", type=float, help="first open-loop rate of the profile's search")
    s.add_argument("--budget-s", type=float, default=540.0, help="stop starting phases after this many seconds")
    s.add_argument("--aligner", metavar="DIR", help="serve with this forced aligner (engine option aligner); a "
                   "synthetic one of the official shapes is written there first if DIR has no config.json, and "
                   "the aligner's own timing (batches 1 and 128, 3-s clips) goes into the report")
    s.add_argument("--timestamps", action="store_true", help="every session asks for word timestamps")
    s.add_argument("--timestamps-hold", choices=["true", "false"],
                   help="with --timestamps: every session.start carries `timestamps_hold`; default: not sent")
    from voxgate.engine.qwen3tts.bench.step_bench import add_arguments as add_steps_arguments

    add_steps_arguments(sub.add_parser("steps", help="the engine loop's captured steps timed per bucket (GPU)"))
    add_codec_arguments(sub.add_parser("codec", help="the incremental codec alone: exactness, bf16 SNR, step speed"))
    from .soak import add_arguments as add_soak_arguments

    add_soak_arguments(sub.add_parser("soak", help="many concurrent sessions on the fake engine, every frame checked"))
    from .stuck import add_arguments as add_stuck_arguments

    add_stuck_arguments(sub.add_parser("stuck", help="server memory per client that stops reading, until let go"))
    from .textrate_sweep import add_arguments as add_textrate_arguments

    add_textrate_arguments(sub.add_parser("textrate", help="first audio and pauses against the text's words/s: "
                                          "text streaming beside sentence mode (fake engine)"))
    r = sub.add_parser("replot", help="re-render report.md and plots from a report.json")
    r.add_argument("report", help="path to report.json")
    from .parse import add_arguments as add_parse_arguments

    add_parse_arguments(sub.add_parser("parse", help="micro-benchmark: parsing one inbound WebSocket message"))
    m = sub.add_parser("merge", help="join reports (e.g. the parts of a full GPU run) into one folder")
    m.add_argument("out", help="output folder")
    m.add_argument("reports", nargs="+", help="report.json or report.json.gz files")


# Subcommand -> (module, entry point), imported only when it runs (most need torch or matplotlib). The engine's own
# benches (steps, codec) live with the engine, in engine/qwen3tts/bench/.
_ENGINE_BENCH = "voxgate.engine.qwen3tts.bench"
_ENTRY_POINTS = {"run": (".main", "bench_run"), "baseline": (".baseline", "baseline_main"),
                 "gpu-suite": (".suite", "suite_main"), "parse": (".parse", "parse_main"),
                 "steps": (f"{_ENGINE_BENCH}.step_bench", "steps_main"),
                 "codec": (f"{_ENGINE_BENCH}.codec_bench", "codec_main"),
                 "stuck": (".stuck", "stuck_main"), "soak": (".soak", "soak_main"),
                 "textrate": (".textrate_sweep", "textrate_main")}


def run(args: argparse.Namespace) -> int:
    if args.bench_command in _ENTRY_POINTS:
        module, name = _ENTRY_POINTS[args.bench_command]
        return getattr(importlib.import_module(module, __package__), name)(args)
    if args.bench_command == "merge":
        from .report import merge

        for f in merge(args.reports, Path(args.out)):
            print(f)
        return 0
    if args.bench_command == "replot":
        from .report import load, write

        for f in write(load(args.report), Path(args.report).parent):
            print(f)
        return 0
    print(f"unknown bench command {args.bench_command!r}", file=sys.stderr)
    return 2

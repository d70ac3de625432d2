"""`voxgate bench codec`: the incremental codec alone, its step implementations (`reference`:
engine/qwen3tts/codec/codec_stream.CodecStream, plain PyTorch; `fused`: codec_fused.FusedCodecStream, Triton
kernels; `fused_gemv`: the same, its transformer's projections through kernels/gemv.py).

    voxgate bench codec --out DIR                                 # CUDA, real shapes
    voxgate bench codec --out DIR --device cpu --tiny --paths reference --shapes 3x1,2x2   # dry run

Self-contained: it writes a synthetic checkpoint (random weights at the real shapes, through synthetic.py) into a
temporary directory, loads only the codec, and writes codec_bench.json and codec_bench.md in DIR:
1. exactness: a > 300-frame utterance streamed in chunks vs one whole decode, fp32, TF32 off (PCM16 LSBs);
2. bf16 (SnakeBeta and the clamp in fp32) vs the fp32 whole decode: SNR over random utterances (median, worst);
3. speed of one step, rows x new frames in (128 x 1, 32 x 4, 8 x 16; `--shapes`), bf16 and fp32, eager and (CUDA)
   replayed from a captured graph; the fused path's kernel variants (`--variants`) side by side.
Torch is imported here, so the `voxgate` command imports this module only when this subcommand runs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from .codec_measure import (
    PATHS,
    bf16_snr,
    conv_breakdown,
    exactness,
    make_codec,
    make_stream,
    profile_step,
    speed,
    variant_settings,
)


def parse_shapes(text: str) -> list[tuple[int, int]]:
    """"128x1,32x4" -> [(128, 1), (32, 4)] (ValueError naming the bad item)."""
    shapes = []
    for item in text.split(","):
        rows, _, frames = item.strip().partition("x")
        if not (rows.isdigit() and frames.isdigit() and int(rows) > 0 and int(frames) > 0):
            raise ValueError(f"--shapes: {item!r} is not ROWSxFRAMES (e.g. 128x1)")
        shapes.append((int(rows), int(frames)))
    return shapes


def render_md(r: dict[str, Any]) -> str:
    lines = [f"# Incremental codec benchmark ({r['device_name']}, torch {r['torch']})", "",
             f"- checkpoint: {r['checkpoint']} ({r['checkpoint_s']} s)",
             f"- state per stream: {r['state_values']:,} values; pool slot {r['slot_bytes_bf16']:,} B in bf16, "
             f"{r['slot_bytes_fp32']:,} B in fp32"]
    for path in r["paths"]:
        ex, snr = r.get(f"exactness_{path}", {}), r.get(f"snr_{path}", {})
        lines += [
            f"- {path}: exactness (fp32, TF32 off, streamed vs whole): " + (
                f"ERROR\n```\n{ex['error']}```" if "error" in ex else f"{ex.get('frames')} frames, " + ", ".join(
                    f"chunks {k}: {v['max_lsb']} LSB (max abs {v['max_abs']:.2e})"
                    for k, v in ex.items() if isinstance(v, dict))),
            f"- {path}: bf16 vs fp32 SNR: " + (
                f"ERROR\n```\n{snr['error']}```" if "error" in snr else
                f"{snr.get('utterances')} utterances ({snr.get('frames')} frames, chunks {snr.get('schedule')}): "
                f"median {snr.get('median_db')} dB, worst {snr.get('worst_db')} dB")]
    lines += [f"- profile of one eager bf16 step, fused path: {r.get('profile')}", "",
              "| step | dtype | rows x frames | eager ms | graph ms | x realtime/stream | audio-s/s |",
              "|---|---|---|---|---|---|---|"]
    for s in r["speed"]:
        what = s["path"] if s["variant"] == "default" else f"{s['path']}, {s['variant']}"
        if "error" in s:
            lines.append(f"| {what} | {s['dtype']} | {s['rows']} x {s['frames']} | error | | | |")
            continue
        graph = s.get("graph_ms", "error" if "graph_error" in s else "-")
        lines.append(f"| {what} | {s['dtype']} | {s['rows']} x {s['frames']} | {s['eager_ms']} | {graph} "
                     f"| {s['x_realtime_per_stream']} | {s['audio_s_per_s']} |")
    convs = r.get("conv_breakdown")
    if isinstance(convs, list):
        total = sum(c["us"] for c in convs)
        lines += ["", f"Fused bf16 step, 128 x 1, each conv kernel (profiler; {total:.0f} us in all):", "",
                  "| conv | M | N | K | dilation | us | TFLOP/s | tile |", "|---|---|---|---|---|---|---|---|"]
        lines += [f"| {c['conv']} | {c['M']} | {c['N']} | {c['K']} | {c['dilation']} | {c['us']} | {c['tflops']} "
                  f"| {c['tile']} |" for c in convs]
    errors = [s.get("graph_error") or s["error"] for s in r["speed"] if "graph_error" in s or "error" in s]
    if errors:
        lines += ["", f"{len(errors)} speed errors; the first:", "```", errors[0], "```"]
    lines += ["", f"Total {r['total_s']} s."]
    return "\n".join(lines) + "\n"


def codec_main(args: argparse.Namespace) -> int:
    paths = [x for x in args.paths.split(",") if x]
    variants = [x for x in args.variants.split(",") if x]
    try:  # bad names fail here, in one line, before minutes of work
        unknown = [p for p in paths if p not in PATHS]
        if unknown:
            raise ValueError(f"unknown codec path {unknown[0]!r}: one of {', '.join(PATHS)}")
        for v in variants:
            variant_settings(v)
        shapes = parse_shapes(args.shapes)
    except ValueError as exc:
        print(f"voxgate bench codec: {exc}", file=sys.stderr)
        return 2
    if args.watchdog:
        import faulthandler

        faulthandler.dump_traceback_later(args.watchdog, repeat=True)
    start = time.perf_counter()
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dev = args.device
    report: dict[str, Any] = {"device": dev, "torch": torch.__version__, "paths": paths, "speed": [],
                              "device_name": torch.cuda.get_device_name() if dev.startswith("cuda") else "cpu"}
    codec, info = make_codec(dev, args.tiny, args.shared)
    report.update(info)
    print(info, flush=True)

    def save() -> None:
        report["total_s"] = round(time.perf_counter() - start, 1)
        (out / "codec_bench.json").write_text(json.dumps(report, indent=2))

    def section(name: str, fn: Callable[..., Any], *fn_args: Any) -> Any:
        """Run one part; a failure is recorded in the report (and the .md) instead of losing the rest."""
        t0 = time.perf_counter()
        try:
            value = fn(*fn_args)
        except Exception:
            value = {"error": traceback.format_exc(limit=6)}
        print(f"[{time.perf_counter() - start:7.1f} s] {name} ({time.perf_counter() - t0:.1f} s): {value}", flush=True)
        save()
        return value

    max_rows = max(r for r, _ in shapes)
    baselines: dict[str, dict[tuple[int, int], torch.Tensor]] = {}
    for path in paths:
        for dtype in (torch.bfloat16,) if args.speed_only else (torch.bfloat16, torch.float32):
            name = "bf16" if dtype == torch.bfloat16 else "fp32"
            if dtype == torch.float32:  # after the bf16 speeds, the headline numbers
                report[f"exactness_{path}"] = section(f"exactness {path}", exactness, codec, dev, args.frames, path)
                report[f"snr_{path}"] = section(f"snr {path}", bf16_snr, codec, dev, args.utterances, path)
            cs = make_stream(path, codec, max_rows + 1, dtype)
            report[f"slot_bytes_{name}"] = cs.pool.slot_bytes
            report["state_values"] = cs.state_values()
            fused_bf16 = path.startswith("fused") and dtype == torch.bfloat16
            if fused_bf16 and not args.speed_only:
                report["profile"] = section("profile", profile_step, cs, max_rows, 1, dev, out / "codec_profile.txt")
                if dev.startswith("cuda"):
                    report["conv_breakdown"] = section("conv breakdown", conv_breakdown, cs, max_rows, 1, dev)
            # each shape's first audio of this dtype, from the first path and variant: later ones report their SNR
            baseline = baselines.setdefault(name, {})
            for variant in variants if fused_bf16 else ["default"]:
                if path.startswith("fused"):
                    cs.conv_options, cs.attention_warps = variant_settings(variant)  # type: ignore[attr-defined]
                for rows, frames in shapes:
                    s = section(f"speed {path} {name} {variant}", speed, cs, rows, frames, dev, args.iters, baseline)
                    s.update(path=path, dtype=name, rows=rows, frames=frames, variant=variant)
                    report["speed"].append(s)
                if args.speed_only and fused_bf16 and dev.startswith("cuda"):  # where each variant's time goes
                    report.setdefault("conv_breakdowns", {})[variant] = section(
                        f"conv breakdown {variant}", conv_breakdown, cs, max_rows, 1, dev)
                    save()  # section() saved before its value was stored here
            del cs
            if dev.startswith("cuda"):
                torch.cuda.empty_cache()
    save()
    if args.speed_only:
        print(json.dumps(report["speed"], indent=1))
        return 0
    (out / "codec_bench.md").write_text(render_md(report))
    print(render_md(report))
    return 0

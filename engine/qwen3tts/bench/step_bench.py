"""`voxgate bench steps`: the engine loop's captured steps timed one bucket at a time, without the gateway.

For each decode-step bucket (rows R, prompt tokens P) and each codec bucket (rows, frames), the captured graph is
replayed many times on streams at a set context length and timed with CUDA events (median); `run()` as the loop
calls it (inputs filled on the host, one copy each way, the wait) is timed by the wall clock, so host time per
step = wall - GPU. Writes steps.json and steps.md (and steps.png with matplotlib): the per-bucket breakdown the
gateway benchmark's report sits beside. Cold start (load, compile and tune, capture) is reported separately.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

FRAME_S = 0.08


def _engine_option(text: str) -> tuple[str, str]:
    """`key=value`, the value left a string: the engine's option parsers type it, as for `voxgate serve`."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    return key, value


DEPTH_VARIANTS = ("fused", "layers", "persistent")


def _depth_variants(text: str) -> tuple[str, ...]:
    names = tuple(name for name in text.split(",") if name and name != "none")
    unknown = [name for name in names if name not in DEPTH_VARIANTS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown depth forms {unknown}: choose from {', '.join(DEPTH_VARIANTS)} "
                                         "or none")
    return names


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--checkpoint", required=True, help="Qwen3-TTS checkpoint folder")
    p.add_argument("--make-like", help="write a synthetic checkpoint like this official one if the folder is empty")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--context", type=int, default=256, help="KV positions each stream already holds")
    p.add_argument("--reps", type=int, default=30, help="timed replays per bucket (after 3 untimed)")
    p.add_argument("--engine-option", action="append", type=_engine_option, default=[], metavar="KEY=VALUE",
                   help="runner options, e.g. row_buckets=1,8,32 prefill_buckets=64 (as the qwen3tts engine takes "
                   "them)")
    p.add_argument("--depth-variants", type=_depth_variants, default=DEPTH_VARIANTS, metavar="NAMES",
                   help="the depth loop alone through these forms, comma-separated (default "
                   f"{','.join(DEPTH_VARIANTS)}; 'none' skips it: the fused and persistent forms compile for a "
                   "minute or more on a cold cache)")
    p.add_argument("--profile", action="store_true",
                   help="also trace one replay of each step bucket's graph kernel by kernel (CUDA only): launches, "
                   "GPU-busy time, idle gaps, the weights' bandwidth floor (step_profile.py)")


def measure(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from voxgate.engine.graphs import median_ms
    from voxgate.engine.qwen3tts.batch_step import SamplingFeatures
    from voxgate.engine.qwen3tts.engine import create_engine
    from voxgate.engine.qwen3tts.model.generate import Qwen3TTS
    from voxgate.engine.qwen3tts.model.sampling import param_row
    from voxgate.engine.qwen3tts.runner import ModelRunner, RunnerConfig
    from voxgate.engine.request import Request
    from voxgate.engine.scheduler import Prefill, StepPlan

    options = dict(args.engine_option)
    engine = create_engine(model=args.checkpoint, **options)  # parses and checks the options as serve would
    t0 = time.perf_counter()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    # the codec in the Talker's dtype, as the engine runs it (bf16 on the GPU)
    tts = Qwen3TTS.from_pretrained(args.checkpoint, device=device, dtype=args.dtype, codec_dtype=args.dtype)
    t1 = time.perf_counter()
    gen = tts.cfg.generation
    config = RunnerConfig(sampling=SamplingFeatures.of(gen), **engine.loop_options)
    runner = ModelRunner(tts, config)
    runner.capture()
    t2 = time.perf_counter()
    cold = {"load_s": t1 - t0, "capture_s": t2 - t1,
            "codec_capture_s": dict(map(lambda kv: (str(kv[0]), kv[1]), runner.chunks.capture_s.items())),
            "step_capture_s": dict(map(lambda kv: (str(kv[0]), kv[1]), runner.steps.capture_s.items()))}
    row = param_row(gen)
    max_rows = max(config.row_buckets)
    slots = list(range(1, min(runner.num_slots, max_rows + config.max_prefills + 1)))
    for s in slots:
        runner.state.params[s] = torch.tensor(row)
    text = tts.prompt_inputs("A sentence of about the usual length, to prefill.", "ryan", "english")
    from voxgate.engine.qwen3tts.model.prompt import prompt_rows

    prompt = prompt_rows(tts.cfg, text)

    def plan_for(rows: int, tokens: int) -> StepPlan:
        decodes = []
        for i in range(rows):
            r = Request(prompt, args.context - 100, 10_000, (1,), row)
            r.slot, r.num_prefilled, r.num_frames = slots[i], r.num_prompt_tokens, 100
            decodes.append(r)
        prefills, left = [], tokens
        for j in range(config.max_prefills):
            if left <= 0:
                break
            n = min(left, len(prompt))
            r = Request(prompt, len(prompt), 100, (1,), row)
            r.slot = slots[rows + j] if rows + j < len(slots) else slots[-1]
            prefills.append(Prefill(r, 0, n))
            left -= n
        return StepPlan(decodes, prefills, first_frames=True)

    def plan_of(key: tuple[int, int]) -> StepPlan:
        return plan_for(key[0], min(key[1], config.max_prefills * len(prompt)))

    steps = []
    for key in sorted(runner.steps.keys()):
        rows, tokens = key
        plan = plan_of(key)
        runner.run(plan)  # fills this bucket's inputs
        gpu = median_ms(lambda key=key: runner.steps(key), args.reps)
        walls = []
        for _ in range(args.reps):
            w0 = time.perf_counter()
            runner.run(plan)
            walls.append((time.perf_counter() - w0) * 1000)
        wall = statistics.median(walls)
        steps.append({"rows": rows, "prefill_tokens": tokens, "gpu_ms": gpu, "run_ms": wall,
                      "host_ms": max(0.0, wall - gpu), "ceiling_audio_s_per_s": rows * FRAME_S / (wall / 1000)})
    codec = []
    for key in sorted(runner.chunks.buckets):
        rows, width = key
        io, _ = runner.chunks._io[key]
        io.clear()
        io.host["slot"][:] = slots[:rows] if rows <= len(slots) else (slots * rows)[:rows]
        io.host["count"][:] = width
        io.upload()
        ms = median_ms(lambda key=key: runner.chunks.lane(key)[1](key), args.reps)
        codec.append({"rows": rows, "frames": width, "gpu_ms": ms, "ms_per_frame": ms / (rows * width)})
    depth = depth_loop_times(runner, row, args.reps, args.depth_variants)
    gpu = torch.cuda.get_device_name() if device == "cuda" else "cpu (dry run)"
    extra: dict[str, Any] = {}
    if getattr(args, "profile", False) and device == "cuda":
        from voxgate.engine.qwen3tts.bench.step_profile import profile_steps, weight_bytes_per_frame

        weights = weight_bytes_per_frame(tts)
        extra = {"weights": weights, "profile": profile_steps(runner, lambda key: runner.run(plan_of(key)), weights)}
    return {**extra, "checkpoint": args.checkpoint, "dtype": args.dtype, "context": args.context, "cold_start": cold,
            "gpu": gpu, "memory": runner.memory(), "steps": steps, "codec": codec, "depth": depth,
            "options": options}


DEPTH_ROWS = (1, 8, 64, 128)
PERSISTENT_ROWS = (1, 8, 16)  # the persistent pass's buckets (it takes <= 16 rows)


def depth_loop_times(runner: Any, param_row: list[float], reps: int,
                     forms: tuple[str, ...] = DEPTH_VARIANTS) -> list[dict[str, Any]]:
    """The depth loop alone (codebooks 1..15 of one frame, with the engine's sampler) per row count, captured in a
    CUDA graph and replayed: passes 1..14 through the fused kernels (depth_fused.py), through the stack's layers,
    and through the persistent pass (kernels/depth_pass.py; rows <= 16 only), on the same weights; only `forms`."""
    import torch
    from voxgate.engine.graphs import median_ms
    from voxgate.engine.qwen3tts.depth_fused import DepthOps, FusedDepth, PersistentDepth
    from voxgate.engine.qwen3tts.model.sampling import (
        SUB_DO_SAMPLE,
        SUB_TEMPERATURE,
        SUB_TOP_K,
        SUB_TOP_P,
        sample_rows,
    )

    model, features = runner.model, runner.config.sampling
    fused, persistent = model.fused_depth, model.persistent_depth  # the runner's choice, restored after
    ops = DepthOps.for_triton(runner.ops.uses_triton)
    weight = model.talker.model.codec_embedding.weight
    out = []
    variants = {"fused": lambda: (fused or FusedDepth(model.predictor, model.predictor_stack, ops), None),
                "layers": lambda: (None, None),
                "persistent": lambda: (None, persistent or PersistentDepth(model.predictor, model.predictor_stack,
                                                                           ops))}
    try:
        for name, build in variants.items():
            if name not in forms:
                continue
            fused_variant, persistent_variant = build()
            model.fused_depth, model.persistent_depth = fused_variant, persistent_variant
            for rows in PERSISTENT_ROWS if name == "persistent" else DEPTH_ROWS:
                h = torch.randn(rows, weight.shape[1], device=weight.device, dtype=weight.dtype)
                c0 = torch.randn_like(h)
                p = torch.tensor(param_row, device=weight.device).expand(rows, -1).contiguous()

                def pick(lg: torch.Tensor, p: torch.Tensor = p) -> torch.Tensor:
                    return sample_rows(lg, p[:, SUB_TEMPERATURE], p[:, SUB_TOP_K], p[:, SUB_TOP_P],
                                       p[:, SUB_DO_SAMPLE], features.candidates, features.top_p, features.sampling)

                def loop(h: torch.Tensor = h, c0: torch.Tensor = c0, pick: Any = pick) -> torch.Tensor:
                    with torch.no_grad():
                        return model.depth_loop(h, c0, pick)

                run = loop
                if weight.is_cuda:
                    stream = torch.cuda.Stream()
                    stream.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(stream):
                        for _ in range(2):
                            loop()
                    torch.cuda.current_stream().wait_stream(stream)
                    graph = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(graph, stream=stream):
                        loop()
                    run = graph.replay
                out.append({"depth": name, "rows": rows, "gpu_ms": median_ms(run, reps)})
    finally:
        model.fused_depth, model.persistent_depth = fused, persistent
    return out


def markdown(res: dict[str, Any]) -> str:
    lines = [f"# Engine steps, {res['gpu']}, {res['dtype']}, context {res['context']}", "",
             f"Cold start: load {res['cold_start']['load_s']:.1f} s, compile + tune + capture "
             f"{res['cold_start']['capture_s']:.1f} s. Slots: {res['memory']['slots']} "
             f"({res['memory']['kv_slots_gib']:.1f} GiB of KV).", "",
             "Engine options: " + (", ".join(f"`{k}={v}`" for k, v in res.get("options", {}).items()) or "the defaults")
             + ".", "",
             "| rows | prompt tokens | GPU ms (replay) | run() ms (wall) | host ms | ceiling audio-s/s |",
             "|---:|---:|---:|---:|---:|---:|"]
    for s in res["steps"]:
        lines.append(f"| {s['rows']} | {s['prefill_tokens']} | {s['gpu_ms']:.2f} | {s['run_ms']:.2f} | "
                     f"{s['host_ms']:.2f} | {s['ceiling_audio_s_per_s']:.0f} |")
    depth = res.get("depth", [])
    if depth:
        names = list(dict.fromkeys(d["depth"] for d in depth))
        lines += ["", "Depth loop alone (codebooks 1..15 of a frame, sampler included; graph replay, ms):", "",
                  "| rows | " + " | ".join(names) + " |", "|---:|" + "---:|" * len(names)]
        for rows in sorted({d["rows"] for d in depth}):
            by = {d["depth"]: d["gpu_ms"] for d in depth if d["rows"] == rows}
            lines.append(f"| {rows} | " + " | ".join(f"{by[n]:.2f}" if n in by else "" for n in names) + " |")
    lines += ["", "| codec rows | frames | GPU ms | ms per frame |", "|---:|---:|---:|---:|"]
    for c in res["codec"]:
        lines.append(f"| {c['rows']} | {c['frames']} | {c['gpu_ms']:.2f} | {c['ms_per_frame']:.3f} |")
    if res.get("profile"):
        from voxgate.engine.qwen3tts.bench.step_profile import markdown as profile_markdown

        lines += profile_markdown(res["profile"], res["weights"])
    return "\n".join(lines) + "\n"


def plot(res: dict[str, Any], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    decode = [s for s in res["steps"] if s["prefill_tokens"] == 0]
    fig, ax = plt.subplots(1, 2, figsize=(10, 4))
    ax[0].plot([s["rows"] for s in decode], [s["gpu_ms"] for s in decode], "o-", label="GPU (replay)")
    ax[0].plot([s["rows"] for s in decode], [s["run_ms"] for s in decode], "s-", label="run() wall")
    ax[0].set(xscale="log", xlabel="decode rows", ylabel="ms per step", title="decode step")
    ax[0].legend()
    ax[1].plot([s["rows"] for s in decode], [s["ceiling_audio_s_per_s"] for s in decode], "o-")
    ax[1].set(xscale="log", yscale="log", xlabel="decode rows", ylabel="audio-s per wall-s",
              title="ceiling without codec")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def steps_main(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.make_like and not Path(args.checkpoint, "config.json").exists():
        import torch
        from voxgate.engine.qwen3tts.tools.synthetic import write_synthetic

        write_synthetic(args.make_like, args.checkpoint, device="cuda" if torch.cuda.is_available() else "cpu")
    res = measure(args)
    (out / "steps.json").write_text(json.dumps(res, indent=2))
    (out / "steps.md").write_text(markdown(res))
    plot(res, out / "steps.png")
    print(markdown(res))
    return 0

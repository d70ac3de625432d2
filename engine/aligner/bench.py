"""`python -m voxgate.engine.aligner.bench`: the batched aligner's time per call and per second of audio.

For each batch size B: B random speech-like clips of `--seconds` each (or of lengths drawn from a range, as in the
engine loop) with sentence-like texts (about 2.5 words a
second), a few untimed calls, then `--runs` timed calls of `Aligner.unit_times_batch` (everything a caller pays:
features, prompts, encoder, decoder, head, repair), each between two device synchronizations, median reported.
The features and the encoder are also timed alone, so the decoder's share is the rest. Peak device memory per
batch size on CUDA. Eager PyTorch, no CUDA graphs, unless `--encoder captured`: the encoder from CUDA graphs where a
call fits its buckets (encoder_graphs.py; without CUDA the same bucketed path without graphs), and
`--decoder-graphs`: the packed decoder likewise (decoder_graphs.py); both are how the engine runs it. `--profile`
(CUDA) traces one call per batch size kernel by kernel: launches, GPU-busy time against the call's span (the gaps
are host work and syncs) and the heaviest kernels, printed and in the JSON. With `--write-synthetic` an empty
`--checkpoint` folder first gets a random checkpoint of the official shapes (or the tiny one), so no download is
needed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .align import Aligner
from .audio_encoder import encoder_frames
from .batch import encode_batch
from .decoder_graphs import GRAPH_STEPS, MAX_CLIPS
from .encoder_graphs import MAX_CHUNKS
from .features import SAMPLE_RATE, clips_on_device, log_mel_batch
from .units import split_units

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
WORDS = ("the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "while", "we", "talk", "about",
         "weather,", "trains", "and", "42", "small", "things;", "it's", "fine.", "really?", "yes!", "今天",
         "天气", "很好")


def parse_seconds(text: str) -> tuple[float, float]:
    """`3` -> (3, 3); `1-6` -> (1, 6): every clip's length, or the range they are drawn from."""
    lo, _, hi = text.partition("-")
    span = (float(lo), float(hi or lo))
    if not 0 < span[0] <= span[1]:
        raise argparse.ArgumentTypeError(f"seconds must be N or LO-HI with 0 < LO <= HI, not {text!r}")
    return span


def make_inputs(batch: int, seconds: float | tuple[float, float],
                seed: int = 0) -> tuple[list[np.ndarray], list[str]]:
    """B clips at 16 kHz (tones under bursts, plus noise) and texts of about 2.5 words per second; each clip
    `seconds` long, or drawn uniformly from the range (lo, hi)."""
    rng = np.random.default_rng(seed)
    lo, hi = seconds if isinstance(seconds, tuple) else (seconds, seconds)
    clips, texts = [], []
    for _ in range(batch):
        length = lo if lo == hi else rng.uniform(lo, hi)
        t = np.arange(round(length * SAMPLE_RATE)) / SAMPLE_RATE
        tones = sum(np.sin(2 * np.pi * f * t) for f in rng.uniform(120, 2400, 3))
        bursts = 0.5 + 0.5 * np.sign(np.sin(2 * np.pi * rng.uniform(2, 5) * t))
        x = tones * bursts + 0.3 * rng.standard_normal(t.size)
        clips.append((0.5 * x / np.abs(x).max()).astype(np.float32))
        texts.append(" ".join(rng.choice(WORDS, size=max(1, round(2.5 * length)))))
    return clips, texts


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_ms(fn: Callable[[], Any], device: torch.device, warmup: int, runs: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        _sync(device)
        t0 = time.perf_counter()
        fn()
        _sync(device)
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def bench_batch(aligner: Aligner, batch: int, seconds: tuple[float, float], warmup: int, runs: int,
                profile: bool = False, share: bool = True) -> dict[str, Any]:
    device = aligner.thinker.lm_head.weight.device
    clips, texts = make_inputs(batch, seconds, seed=batch)
    tensors = clips_on_device(clips, device)
    n_mels = aligner.cfg.audio.num_mel_bins
    mel, frames = log_mel_batch(tensors, n_mels)
    tower, dtype = aligner.thinker.audio_tower, aligner.thinker.lm_head.weight.dtype
    encode = aligner.encoder or (lambda mel, frames: encode_batch(tower, mel, frames, share))
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    with torch.inference_mode():
        full = median_ms(lambda: aligner.unit_times_batch(clips, texts), device, warmup, runs)
        features = median_ms(lambda: log_mel_batch(tensors, n_mels), device, warmup, runs)
        encoder = median_ms(lambda: encode(mel.to(dtype), frames), device, warmup, runs)
        traced = kernel_profile(lambda: aligner.unit_times_batch(clips, texts)) if profile else None
    units = [[u.text for u in split_units(t)] for t in texts]
    prompt = [len(aligner.prompt.ids(u, encoder_frames(f))) for u, f in zip(units, frames, strict=True)]
    captured = aligner.encoder is not None and aligner.encoder.fits(frames)  # else the encoder ran eagerly
    audio_s = sum(len(c) for c in clips) / SAMPLE_RATE
    decoder_captured = aligner.captured is not None and aligner.captured.fits(
        sum(prompt), batch, max(prompt))
    return dict(batch=batch, seconds=list(seconds), audio_s=round(audio_s, 3), ms_per_call=round(full, 3),
                ms_per_audio_second=round(full / audio_s, 4), features_ms=round(features, 3),
                encoder_ms=round(encoder, 3), encoder_captured=captured, decoder_captured=decoder_captured,
                decoder_and_rest_ms=round(full - features - encoder, 3),
                units_per_clip=round(statistics.mean(map(len, units)), 2), max_prompt_tokens=max(prompt),
                peak_memory_mib=round(torch.cuda.max_memory_allocated(device) / 2**20, 1)
                if device.type == "cuda" else None, **({"profile": traced} if traced is not None else {}))


def kernel_profile(call: Callable[[], Any], top: int = 12) -> dict[str, Any]:
    """One call's kernels (CUDA; the median of a few traced calls, as `voxgate bench steps --profile` traces a
    step): launches, GPU-busy ms (the union of kernel intervals), the span from first kernel to last, its idle gaps
    (host work and syncs between kernels), and the heaviest kernels by total time."""
    from ..qwen3tts.bench.step_profile import profile_replay

    row = profile_replay(call)
    names = sorted(row.pop("by_name").items(), key=lambda kv: -kv[1]["total_us"])
    return {"launches": row["launches"], "busy_ms": round(row["busy_us"] / 1000, 3),
            "span_ms": round(row["span_us"] / 1000, 3), "gaps_ms": round(row["gaps_us"] / 1000, 3),
            "top": [{"name": n[:90], "count": v["count"], "total_ms": round(v["total_us"] / 1000, 3)}
                    for n, v in names[:top]]}


def profile_lines(row: dict[str, Any]) -> list[str]:
    """The printed form of one batch size's `kernel_profile`."""
    p = row["profile"]
    lines = [f"kernels of one call of {row['batch']} clips: {p['launches']} launches, GPU-busy {p['busy_ms']:.2f} "
             f"ms in a span of {p['span_ms']:.2f} ms (idle gaps {p['gaps_ms']:.2f} ms)",
             f"{'total ms':>9} {'count':>6}  kernel"]
    lines += [f"{k['total_ms']:>9.3f} {k['count']:>6}  {k['name']}" for k in p["top"]]
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m voxgate.engine.aligner.bench", description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", required=True, type=Path, help="aligner checkpoint folder")
    p.add_argument("--write-synthetic", choices=("full", "tiny"),
                   help="first write a random checkpoint there (official shapes, or tiny) unless it has config.json")
    p.add_argument("--batches", default="1,8,32,128", help="comma-separated batch sizes")
    p.add_argument("--seconds", type=parse_seconds, default=(3.0, 3.0),
                   help="seconds of audio per clip, or LO-HI: each clip's length drawn from that range (default 3)")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--decoder", choices=("auto", "packed", "padded"), default="auto",
                   help="the text decoder's batch path (engine/aligner/batch.py; auto: packed on CUDA)")
    p.add_argument("--encoder", choices=("eager", "captured"), default="eager",
                   help="the audio encoder eager (batch.encode_batch) or captured (encoder_graphs.py: CUDA graphs "
                        "where a call fits, eager where not; off CUDA its bucketed path without graphs)")
    p.add_argument("--decoder-graphs", action="store_true",
                   help="the packed decoder replayed from CUDA graphs where a call fits, as the engine runs it "
                        "(engine option aligner_graphs; decoder_graphs.py)")
    p.add_argument("--graph-clips", type=int, default=MAX_CLIPS,
                   help=f"the decoder graphs' largest call in clips (engine option aligner_graph_clips; default "
                        f"{MAX_CLIPS})")
    p.add_argument("--graph-chunks", type=int, default=MAX_CHUNKS,
                   help=f"the encoder graphs' largest call in 1-s chunks (engine option aligner_graph_chunks; "
                        f"default {MAX_CHUNKS})")
    p.add_argument("--graph-steps", type=int, default=GRAPH_STEPS, choices=(1, 2, 4, 8),
                   help=f"token and chunk buckets to an octave (engine option aligner_graph_steps; default "
                        f"{GRAPH_STEPS}; 1: powers of two)")
    p.add_argument("--prefill-attention", action="store_true",
                   help="the packed decoder's attention by blocks of a clip's tokens (kernels/prefill_attention.py; "
                        "engine option aligner_prefill_attention; CUDA)")
    p.add_argument("--no-pack-windows", action="store_true",
                   help="with --encoder captured: the encoder's attention windows a row each, as before they were "
                        "packed (to measure against; engine/aligner/windows.py)")
    p.add_argument("--profile", action="store_true",
                   help="also trace one call per batch size kernel by kernel (CUDA only): launches, GPU-busy time, "
                        "idle gaps, the heaviest kernels")
    p.add_argument("--warmup", type=int, default=2, help="untimed calls before each timing")
    p.add_argument("--runs", type=int, default=5, help="timed calls (median)")
    p.add_argument("--json", type=Path, help="write the results here")
    args = p.parse_args(argv)
    if args.no_pack_windows and args.encoder != "captured":
        p.error("--no-pack-windows measures the captured encoder: add --encoder captured")

    report: dict[str, Any] = dict(device=args.device, dtype=args.dtype, checkpoint=str(args.checkpoint))
    if args.write_synthetic and not (args.checkpoint / "config.json").is_file():
        from .synthetic import write_synthetic_aligner

        t0 = time.perf_counter()
        write_synthetic_aligner(args.checkpoint, tiny=args.write_synthetic == "tiny")
        report["write_s"] = round(time.perf_counter() - t0, 2)
    t0 = time.perf_counter()
    aligner = Aligner.from_pretrained(args.checkpoint, device=args.device, dtype=DTYPES[args.dtype],
                                      decoder=args.decoder)
    if args.prefill_attention:
        try:
            aligner.use_prefill_attention()
        except ValueError as exc:
            p.error(f"--prefill-attention: {exc}")
    report["prefill_attention"] = args.prefill_attention
    report["decoder"] = aligner.decoder
    report["load_s"] = round(time.perf_counter() - t0, 2)
    report["encoder"] = args.encoder
    report["decoder_graphs"] = args.decoder_graphs
    report["graph_clips"], report["graph_chunks"] = args.graph_clips, args.graph_chunks
    report["graph_steps"] = args.graph_steps
    if args.encoder == "captured" or args.decoder_graphs:
        t0 = time.perf_counter()
        aligner.capture(progress=False, decoder_graphs=args.decoder_graphs, encoder_graphs=args.encoder == "captured",
                        max_clips=args.graph_clips, max_chunks=args.graph_chunks, steps=args.graph_steps)
        report["capture_s"] = round(time.perf_counter() - t0, 2)
    report["pack_windows"] = share = not args.no_pack_windows
    if aligner.encoder is not None:
        aligner.encoder.share = share
    profile = args.profile and args.device.startswith("cuda")
    if args.profile and not profile:
        print("--profile traces CUDA kernels: skipped on this device")
    if args.device.startswith("cuda"):
        report["device_name"] = torch.cuda.get_device_name(torch.device(args.device))
    cfg = aligner.cfg
    report["model"] = dict(encoder_layers=cfg.audio.encoder_layers, d_model=cfg.audio.d_model,
                           decoder_layers=cfg.text.num_hidden_layers, hidden=cfg.text.hidden_size)
    report["results"] = []
    print(f"{'batch':>6} {'audio s':>8} {'ms/call':>10} {'ms/audio s':>11} {'features':>9} {'encoder':>9} "
          f"{'decoder+':>9} {'peak MiB':>9}  graphs")
    for batch in (int(b) for b in args.batches.split(",")):
        row = bench_batch(aligner, batch, args.seconds, args.warmup, args.runs, profile, share)
        report["results"].append(row)
        graphs = "+".join(p for p, used in (("encoder", row["encoder_captured"]),
                                             ("decoder", row["decoder_captured"])) if used) or "none"
        print(f"{batch:>6} {row['audio_s']:>8.1f} {row['ms_per_call']:>10.2f} {row['ms_per_audio_second']:>11.3f} "
              f"{row['features_ms']:>9.2f} {row['encoder_ms']:>9.2f} {row['decoder_and_rest_ms']:>9.2f} "
              f"{row['peak_memory_mib'] or '-':>9}  {graphs}", flush=True)
    for row in report["results"]:
        if "profile" in row:
            print("\n".join(["", *profile_lines(row)]))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The codec benchmark's measurements (`voxgate bench codec`, codec.py): a codec to measure, exactness, bf16 SNR,
step speed eager and replayed from a CUDA graph, and where a fused step's time goes. Imports torch: loaded only
when the benchmark runs (or by the tests, which share `pcm16` and `snr_db`)."""

from __future__ import annotations

import statistics
import tempfile
import time
import traceback
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from voxgate.engine.qwen3tts.bench.codec_runner import CodecRunner
from voxgate.engine.qwen3tts.codec.codec import CodecDecoder
from voxgate.engine.qwen3tts.codec.codec_state import StreamingCodec
from voxgate.engine.qwen3tts.codec.codec_stream import CodecStream
from voxgate.engine.qwen3tts.model.checkpoint import load_codec

LIKE = "Qwen3-TTS-12Hz-0.6B-CustomVoice"  # the smallest Talker to write; the codec is the same in every model
PATHS = ("fused", "fused_gemv", "reference")
FRAME_S = 0.08
# design §9 (speech_tokenizer/config.json decoder_config): used only when the shared configs are absent
REAL_CODEC = dict(codebook_size=2048, codebook_dim=512, num_quantizers=16, latent_dim=1024, hidden_size=512,
                  intermediate_size=1024, num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=16,
                  head_dim=64, sliding_window=72, rope_theta=10000.0, rms_norm_eps=1e-5, layer_scale_initial_scale=0.01,
                  decoder_dim=1536, upsampling_ratios=[2, 2], upsample_rates=[8, 5, 4, 3])
# Fused-path variants: each a change from the measured defaults (docs/codec.md has what each measured);
# "tma_min_<rows>" sets ConvOptions.tma_min_length; join variants with "+".
VARIANTS = ("default", "pointer", "accurate_sin", "no_autotune", "attn_2warps", "tma_min_<rows>")


def pcm16(x: torch.Tensor) -> torch.Tensor:
    """Float audio in [-1, 1] as PCM16 sample values (int32, to subtract without overflow)."""
    return (x.clamp(-1, 1) * 32767).round().to(torch.int32)


def snr_db(x: torch.Tensor, ref: torch.Tensor) -> float:
    """Signal-to-noise ratio of x against ref in dB (inf when equal)."""
    noise = (x.double() - ref.double()).pow(2).sum()
    return float(10 * torch.log10(ref.double().pow(2).sum() / noise)) if noise > 0 else float("inf")


def make_codec(device: str, tiny: bool, shared: str | None, seed: int = 0) -> tuple[CodecDecoder, dict[str, Any]]:
    """The codec of a synthetic checkpoint, written and loaded through the real writer and loader; without the
    shared configs, the codec alone drawn in memory at the shapes of design §9 with the same initialiser."""
    from voxgate.engine.qwen3tts.tools.synthetic import TINY_CODEC, random_state, write_synthetic

    start = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory(prefix="codec-bench-") as tmp:
            write_synthetic(LIKE, tmp, seed=seed, tiny=tiny, shared=Path(shared) if shared else None,
                            device=device, with_encoder=False)
            codec = load_codec(tmp, device=device, dtype=torch.float32)
        info = {"checkpoint": f"synthetic {LIKE}{' (tiny)' if tiny else ''}, written and loaded"}
    except FileNotFoundError as exc:
        from voxgate.engine.qwen3tts.model.config import CodecDecoderConfig

        cfg = CodecDecoderConfig.from_dict({**REAL_CODEC, **(TINY_CODEC if tiny else {})})
        with torch.device("meta"):
            codec = CodecDecoder(cfg)
        shapes = {f"decoder.{k}": tuple(v.shape) for k, v in codec.state_dict().items()}
        gen = torch.Generator(device).manual_seed(seed)
        state = random_state(shapes, torch.float32, gen, torch.device(device), cfg.num_hidden_layers,
                             cfg.layer_scale_initial_scale)
        codec.load_state_dict({k.removeprefix("decoder."): v.to(device) for k, v in state.items()}, assign=True)
        codec.eval()
        info = {"checkpoint": f"codec only, drawn in memory (no shared configs: {exc})"}
    info["checkpoint_s"] = round(time.perf_counter() - start, 1)
    return codec, info


def make_stream(path: str, codec: CodecDecoder, num_slots: int, dtype: torch.dtype | None = None,
                tuned: bool = True) -> StreamingCodec:
    """`fused` (FusedCodecStream; tuned=False: fixed conv tiles, for runs over many shapes), `fused_gemv` (the same
    with the transformer's projections through kernels/gemv.py, PDL where it runs: the engine's codec_gemm = gemv)
    or `reference`."""
    if path in ("fused", "fused_gemv"):
        from voxgate.engine.qwen3tts.codec.codec_fused import FusedCodecStream
        from voxgate.kernels.causal_conv import ConvOptions

        linear = None
        if path == "fused_gemv":
            from voxgate.engine.qwen3tts.runner_config import pdl_works
            from voxgate.engine.qwen3tts.small_gemm import linears

            device = next(codec.parameters()).device
            linear = linears("gemv", True, device.type == "cuda" and pdl_works(device))[0]
        return FusedCodecStream(codec, num_slots, dtype=dtype, conv_options=ConvOptions(autotune=tuned),
                                linear=linear)
    if path != "reference":
        raise ValueError(f"unknown codec path {path!r}: one of {', '.join(PATHS)}")
    return CodecStream(codec, num_slots, dtype=dtype)


def variant_settings(variant: str) -> tuple[Any, int]:
    """(ConvOptions, attention warps) of a fused-path variant, or of several joined by "+"."""
    from voxgate.kernels.causal_conv import ConvOptions

    options, warps = ConvOptions(), 4
    for part in variant.split("+"):
        if part == "pointer":
            options = replace(options, tma=False)
        elif part == "accurate_sin":
            options = replace(options, fast_sin=False)
        elif part == "no_autotune":
            options = replace(options, autotune=False)
        elif part == "attn_2warps":
            warps = 2
        elif part.startswith("tma_min_") and part[8:].isdigit():
            options = replace(options, tma_min_length=int(part[8:]))
        elif part != "default":
            raise ValueError(f"unknown variant {part!r}: one of {', '.join(VARIANTS)}")
    return options, warps


def _codes(frames: int, seed: int, device: str) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 2048, (frames, 16), generator=g).to(device)


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def exactness(codec: CodecDecoder, device: str, frames: int, path: str) -> dict[str, Any]:
    """A long utterance streamed in chunks vs one whole decode, in the codec's dtype (fp32: PCM16 LSBs)."""
    codes = _codes(frames, 1, device)
    whole = codec.decode(codes)
    cs = make_stream(path, codec, 2, tuned=False)
    out: dict[str, Any] = {"frames": frames}
    for name, schedule in (("4,8,16", [4, 8, 16]), ("1,3,8,16", [1, 3, 8, 16])):
        got = cs.decode_chunks(codes, schedule)
        out[name] = {"max_lsb": int((pcm16(got) - pcm16(whole)).abs().max()),
                     "max_abs": float((got - whole).abs().max())}
    out["pass"] = all(v["max_lsb"] <= 1 for k, v in out.items() if isinstance(v, dict))
    return out


def bf16_snr(codec: CodecDecoder, device: str, utterances: int, path: str) -> dict[str, Any]:
    """bf16 streamed (chunks 4, 8, 16) against the fp32 whole decode, over random utterances of 20-120 frames."""
    cs = make_stream(path, codec, 2, torch.bfloat16, tuned=False)  # many chunk widths: no tuning per shape
    lengths = torch.randint(20, 121, (utterances,), generator=torch.Generator().manual_seed(7)).tolist()
    snrs = []
    for i, n in enumerate(lengths):
        codes = _codes(n, 100 + i, device)
        snrs.append(snr_db(cs.decode_chunks(codes, [4, 8, 16]), codec.decode(codes)))
    return {"utterances": utterances, "frames": f"{min(lengths)}-{max(lengths)}", "schedule": "4,8,16",
            "median_db": round(statistics.median(snrs), 2), "worst_db": round(min(snrs), 2)}


def _time(fn: Any, device: str, iters: int) -> float:
    """Median of `iters` timed calls, seconds (each call synced)."""
    times = []
    for _ in range(iters):
        _sync(device)
        t0 = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def speed(cs: StreamingCodec, rows: int, frames: int, device: str, iters: int,
          baseline: dict[tuple[int, int], torch.Tensor] | None = None) -> dict[str, Any]:
    """One step of `rows` streams x `frames` new frames, state warmed past the window. The codes are the same
    for every call with the same shape, so the first timed step's audio can be compared across paths and kernel
    variants: `baseline` keeps the first path's and variant's per shape, and later ones report their SNR against it
    (a wrong kernel shows up as a low SNR; rounding differences alone stay far above 30 dB)."""
    g = torch.Generator().manual_seed(1000 * rows + frames)
    cs.pool.reset(range(cs.pool.num_slots))
    slots = torch.arange(1, rows + 1, device=device)
    codes = torch.randint(0, 2048, (rows, frames, 16), generator=g).to(device)
    num = torch.full((rows,), frames, device=device)
    for _ in range(5):  # 80 frames: the attention window is full
        cs.step(slots, torch.randint(0, 2048, (rows, 16, 16), generator=g).to(device),
                torch.full((rows,), 16, device=device))
    audio = cs.step(slots, codes, num).float().cpu()
    res: dict[str, Any] = {"rows": rows, "frames": frames}
    if baseline is not None:
        first = baseline.setdefault((rows, frames), audio)
        if first is not audio:
            res["snr_vs_first_variant_db"] = round(snr_db(audio, first), 1)
    res["eager_ms"] = round(_time(lambda: cs.step(slots, codes, num), device, iters) * 1e3, 3)
    if device.startswith("cuda"):
        try:
            res.update(_graph(cs, slots, codes, num, iters))
        except Exception:
            res["graph_error"] = traceback.format_exc(limit=4)
    best = res.get("graph_ms", res["eager_ms"]) / 1e3
    res["x_realtime_per_stream"] = round(frames * FRAME_S / best, 1)
    res["audio_s_per_s"] = round(rows * frames * FRAME_S / best, 1)
    return res


def _graph(cs: StreamingCodec, slots: torch.Tensor, codes: torch.Tensor, num: torch.Tensor,
           iters: int) -> dict[str, Any]:
    """Capture one bucket (CodecRunner: the GraphSet capture the engine loop's chunk_decoder.py uses too); check a
    replay against eager from the same state; time replays."""
    bucket = (slots.shape[0], codes.shape[1])
    runner = CodecRunner(cs, [bucket], progress=False)
    before = cs.pool.data.clone()
    want = cs.step(slots, codes, num).clone()
    cs.pool.data.copy_(before)
    got = runner(slots, codes, num)
    torch.cuda.synchronize()
    diff = float((got - want).abs().max())
    replay = _time(lambda: [runner.graphs(bucket) for _ in range(10)], "cuda", max(3, iters // 10)) / 10
    return {"graph_ms": round(replay * 1e3, 3), "graph_vs_eager_max_abs": diff}


def profile_step(cs: StreamingCodec, rows: int, frames: int, device: str, path: Path) -> dict[str, Any]:
    """Top kernels of one eager step (torch.profiler) into `path`: where the step's time goes."""
    from torch.profiler import ProfilerActivity, profile

    slots = torch.arange(1, rows + 1, device=device)
    codes = torch.randint(0, 2048, (rows, frames, 16), device=device)
    num = torch.full((rows,), frames, device=device)
    cs.step(slots, codes, num)
    cuda = device.startswith("cuda")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        cs.step(slots, codes, num)
        _sync(device)
    key = "self_device_time_total" if cuda else "self_cpu_time_total"
    table = prof.key_averages().table(sort_by=key, row_limit=25)
    path.write_text(f"one eager step, {rows} rows x {frames} frames, {getattr(cs, 'dtype', '')}, "
                    f"{type(cs).__name__}\n{table}\n")
    kernels = [e for e in prof.events() if cuda and e.device_type == torch.autograd.DeviceType.CUDA]
    return {"file": path.name, "rows": rows, "frames": frames, "cuda_kernels_per_step": len(kernels) if cuda else None}


def conv_breakdown(cs: Any, rows: int, frames: int, device: str) -> list[dict[str, Any]]:
    """Fused path, one eager step under the profiler: each conv kernel's GPU time (the profiler's kernel records,
    in launch order, matched to the step's conv calls), its GEMM shape, achieved TFLOP/s, and the tuned tile."""
    from torch.profiler import ProfilerActivity, profile
    from voxgate.kernels import causal_conv as ccm
    from voxgate.kernels import conv_tma

    slots = torch.arange(1, rows + 1, device=device)
    codes = torch.randint(0, 2048, (rows, frames, 16), device=device)
    num = torch.full((rows,), frames, device=device)
    cs.step(slots, codes, num)  # tuned before timing
    options = cs.conv_options
    calls: list[tuple[Any, tuple[int, ...], str]] = []
    run = cs._run

    def recording_run(conv: Any, x: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        state = None if conv.state is None else cs.pool.views[conv.state]
        tma = options.tma and ccm._tma_tiling(x, conv.w, state, conv.taps, options.tma_min_length) is not None
        out = run(conv, x, *args, **kwargs)
        if tma:
            tile = f"TMA {conv_tma._conv_tma_tuned.best_config}" if options.autotune else "TMA fixed"
        else:
            tile = getattr(ccm._causal_conv_tuned, "best_config", None) if options.autotune else "fixed"
        calls.append((conv, tuple(x.shape), str(tile)))
        return out

    cs._run = recording_run
    try:
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            cs.step(slots, codes, num)
            torch.cuda.synchronize()
    finally:
        del cs._run
    names = ("_causal_conv_kernel", "_conv_tma_kernel")
    kernels = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
                      and any(name in e.name for name in names)), key=lambda e: e.time_range.start)
    if len(kernels) != len(calls):
        raise RuntimeError(f"{len(kernels)} conv kernels profiled for {len(calls)} conv calls")
    table = []
    for (conv, (b, length, cin), tile), event in zip(calls, kernels, strict=True):
        m, n, k = b * length, conv.w.shape[1], conv.taps * cin
        us = event.time_range.elapsed_us()
        table.append({"conv": conv.state or "1x1", "M": m, "N": n, "K": k, "dilation": conv.dilation,
                      "us": round(us, 1), "tflops": round(2 * m * n * k / us / 1e6, 1), "tile": tile})
    return table

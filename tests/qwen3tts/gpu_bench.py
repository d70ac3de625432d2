"""GPU measurements for docs/gpu-notes.md: real-shape synthetic 1.7B checkpoint, fp32 parity with the reference,
eager bf16 batch-1 speed (audio-s per wall-s) of voxgate's port and of the reference on the same checkpoint.

    python tests/qwen3tts/gpu_bench.py write --out /tmp/ck17
    python tests/qwen3tts/gpu_bench.py ours --ckpt /tmp/ck17 --json ours.json
    python tests/qwen3tts/gpu_bench.py reference --ckpt /tmp/ck17 --json ref.json      # needs transformers 4.57.3
    python tests/qwen3tts/gpu_bench.py parity --ckpt /tmp/ck17 --json parity.json      # needs transformers 4.57.3
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import torch

LIKE = "Qwen3-TTS-12Hz-1.7B-CustomVoice"
TEXT = "Real-time speech synthesis needs every frame on time, so we measure the plain model first."
FRAME_S = 0.08
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # cpu: dry runs on tiny checkpoints


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def write_checkpoint(out: Path, like: str = LIKE, tiny: bool = False) -> dict[str, Any]:
    from voxgate.engine.qwen3tts.tools.synthetic import write_synthetic

    start = time.perf_counter()
    info: dict[str, Any] = {"like": like}
    try:
        write_synthetic(like, out, seed=0, device=DEVICE, tiny=tiny)
        info["encoder"] = True
    except Exception:  # the Mimi encoder shapes come from transformers; the port does not need them
        info["encoder_error"] = traceback.format_exc(limit=3)
        write_synthetic(like, out, seed=0, device=DEVICE, tiny=tiny, with_encoder=False)
        info["encoder"] = False
    info["write_s"] = time.perf_counter() - start
    return info


def bench_ours(ckpt: Path, frames: int, seed: int = 0, dtype: str = "bf16") -> dict[str, Any]:
    from voxgate.engine.qwen3tts.model.generate import Qwen3TTS

    start = time.perf_counter()
    tts = Qwen3TTS.from_pretrained(ckpt, device=DEVICE, dtype=dtype, progress=False)
    load_s = time.perf_counter() - start
    inputs = tts.prompt_inputs(TEXT, "ryan", "english")
    gen = tts.cfg.generation
    tts.decode(tts.generate_codes(tts.build(inputs), gen, 8, torch.Generator(DEVICE).manual_seed(seed)))  # warm-up
    _sync()
    t0 = time.perf_counter()
    # EOS blocked: random weights may sample it early; the benchmark needs a fixed length.
    codes = tts.generate_codes(tts.build(inputs), gen, frames, torch.Generator(DEVICE).manual_seed(seed),
                               min_frames=frames)
    _sync()
    t1 = time.perf_counter()
    audio = tts.decode(codes)
    _sync()
    t2 = time.perf_counter()
    n = codes.shape[0]
    parts = _part_times(tts)
    import transformers

    return {
        **parts,
        "impl": "voxgate", "dtype": dtype, "codec_dtype": "fp32", "frames": n, "audio_s": n * FRAME_S,
        "load_s": load_s, "generate_s": t1 - t0, "decode_s": t2 - t1, "ms_per_frame": 1000 * (t1 - t0) / n,
        "audio_s_per_s_generate": n * FRAME_S / (t1 - t0), "audio_s_per_s_total": n * FRAME_S / (t2 - t0),
        "finite": bool(torch.isfinite(torch.as_tensor(audio)).all()),
        "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if DEVICE == "cuda" else 0.0,
        "transformers": transformers.__version__, "torch": torch.__version__,
    }


@torch.inference_mode()
def _part_times(tts: Any, steps: int = 32) -> dict[str, float]:
    """Where a frame's time goes: one Talker step (28 layers, 1 token) and one predictor call (15 steps)."""
    talker = tts.talker
    h = talker.model.codec_embedding.weight[:1]  # [1, H]
    cache = talker.new_cache(1, steps + 1, h.dtype, h.device)
    fns = {"talker_step_ms": lambda: talker(h[:, None], cache),
           "predictor_frame_ms": lambda: talker.code_predictor.predict(h, h, lambda lg: lg.argmax(-1))}
    out = {}
    for name, fn in fns.items():
        fn()
        _sync()
        t0 = time.perf_counter()
        for _ in range(steps - 1):
            fn()
        _sync()
        out[name] = 1000 * (time.perf_counter() - t0) / (steps - 1)
    return out


def bench_reference(ckpt: Path, frames: int, seed: int = 0) -> dict[str, Any]:
    sys.path.insert(0, str(Path(__file__).parent))
    from reference import reference_codec, reference_model  # type: ignore[import-not-found]
    from voxgate.engine.qwen3tts.model.tokenizer import TextTokenizer

    start = time.perf_counter()
    ref = reference_model(ckpt, torch.bfloat16, DEVICE, attn="sdpa")
    codec = reference_codec(ckpt, torch.bfloat16, DEVICE)  # the wrapper casts the codec to the model dtype
    load_s = time.perf_counter() - start
    ids = TextTokenizer(ckpt).encode(f"<|im_start|>assistant\n{TEXT}<|im_end|>\n<|im_start|>assistant\n")

    def run(n: int) -> torch.Tensor:
        torch.manual_seed(seed)
        codes, _ = ref.generate(input_ids=[torch.tensor([ids], device=DEVICE)], languages=["english"],
                                speakers=["ryan"], non_streaming_mode=True, max_new_tokens=n + 1)
        return codes[0]

    with torch.no_grad():
        codec.chunked_decode(run(8).T[None])  # warm-up
        _sync()
        t0 = time.perf_counter()
        codes = run(frames)
        _sync()
        t1 = time.perf_counter()
        audio = codec.chunked_decode(codes.clamp(min=0).T[None])
        _sync()
        t2 = time.perf_counter()
    n = codes.shape[0]
    import transformers

    return {
        "impl": "qwen-tts 0.1.1", "dtype": "bf16", "codec_dtype": "bf16", "attn": "sdpa", "frames": n,
        "audio_s": n * FRAME_S, "load_s": load_s, "generate_s": t1 - t0, "decode_s": t2 - t1,
        "ms_per_frame": 1000 * (t1 - t0) / n, "audio_s_per_s_generate": n * FRAME_S / (t1 - t0),
        "audio_s_per_s_total": n * FRAME_S / (t2 - t0), "finite": bool(torch.isfinite(audio.float()).all()),
        "transformers": transformers.__version__, "torch": torch.__version__,
    }


def parity_fp32(ckpt: Path, frames: int = 64, codec_frames: int = 300) -> dict[str, Any]:
    """Greedy codes (frames) and codec audio (codec_frames) in fp32 at real shapes, ours vs the reference."""
    sys.path.insert(0, str(Path(__file__).parent))
    from reference import reference_codec, reference_model  # type: ignore[import-not-found]
    from voxgate.engine.qwen3tts.model.generate import Qwen3TTS

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    out: dict[str, Any] = {"frames": frames}
    tts = Qwen3TTS.from_pretrained(ckpt, device=DEVICE, dtype="fp32", progress=False)
    ref = reference_model(ckpt, torch.float32, DEVICE, attn="eager")
    gen = tts.cfg.generation.greedy()
    for non_streaming in (True, False):
        inputs = tts.prompt_inputs(TEXT, "ryan", "english", non_streaming=non_streaming)
        ours = tts.generate_codes(tts.build(inputs), gen, frames)
        with torch.no_grad():
            want, _ = ref.generate(input_ids=[torch.tensor([inputs.text_ids], device=DEVICE)], languages=["english"],
                                   speakers=["ryan"], non_streaming_mode=non_streaming, max_new_tokens=frames + 1,
                                   do_sample=False, subtalker_dosample=False)
        want = want[0]
        same = ours.shape == want.shape and bool(torch.equal(ours, want))
        key = "text_up_front" if non_streaming else "text_per_frame"
        out[key] = {"codes_equal": same, "ours_frames": int(ours.shape[0]), "ref_frames": int(want.shape[0])}
        if not same and ours.shape == want.shape:
            bad = (ours != want).any(1).nonzero()
            out[key]["first_mismatch_frame"] = int(bad[0])
            out[key]["mismatched_frames"] = int(bad.numel())
    del ref
    codec = reference_codec(ckpt, torch.float32, DEVICE)
    codes = torch.randint(0, 2048, (codec_frames, 16), generator=torch.Generator().manual_seed(0))
    got = torch.as_tensor(tts.decode(codes.to(DEVICE)))
    with torch.no_grad():
        want_audio = codec.chunked_decode(codes.to(DEVICE).T[None])[0, 0].float().cpu()
    scale = float(want_audio.abs().max())
    out["codec"] = {"frames": codec_frames, "max_abs_err": float((got - want_audio).abs().max()), "scale": scale}
    return out


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=["write", "ours", "reference", "parity"])
    p.add_argument("--ckpt", type=Path, default=Path("/tmp/ck17"))
    p.add_argument("--out", type=Path, default=Path("/tmp/ck17"))
    p.add_argument("--frames", type=int, default=128)
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--tiny", action="store_true", help="dry run: tiny checkpoint")
    a = p.parse_args()
    if a.what == "write":
        res = write_checkpoint(a.out, tiny=a.tiny)
    elif a.what == "ours":
        res = {"bf16": bench_ours(a.ckpt, a.frames)}
    elif a.what == "reference":
        res = bench_reference(a.ckpt, a.frames)
    else:
        res = parity_fp32(a.ckpt, frames=min(a.frames, 64))
    res["gpu"] = torch.cuda.get_device_name() if DEVICE == "cuda" else "none"
    text = json.dumps(res, indent=2)
    print(text)
    if a.json:
        a.json.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

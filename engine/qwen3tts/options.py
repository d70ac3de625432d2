"""The Qwen3-TTS engine's options (`--engine-option key=value`): what each means, and the parsers of their string
values (a TOML config gives typed values, the command line strings)."""

from __future__ import annotations

from typing import Any

# Engine options (`--engine-option key=value`), with their meaning; create_engine refuses anything else.
OPTIONS = {
    "model": "checkpoint directory or Hugging Face repo id (required)",
    "device": "cuda, cuda:N or cpu (default: cuda when available)",
    "dtype": "Talker dtype: bf16 (CUDA default), fp16, fp32 (CPU default)",
    "codec_dtype": "codec dtype (default: the Talker's)",
    "max_frames": "hard cap on frames per stream (80 ms each; default 2048)",
    "budget_factor": "frame budget = this x the text's expected frames (default 2.5), at least min_budget_s",
    "min_budget_s": "the smallest frame budget, in seconds of audio (default 2)",
    "chunk_frames": "codec chunk schedule in frames, e.g. 1,2,4,8,16 (the last repeats)",
    "codec_width": "frames per stream in one codec call: chunks are decoded in pieces this wide (default 4)",
    "codec_buckets": "captured codec calls as ROWSxFRAMES, e.g. 1x4,8x4,32x4 (default: 1,8,16,32,64 x codec_width)",
    "ref_audio": "Base: a 16-bit WAV whose x-vector is the `clone` voice",
    "greedy": "true: greedy decoding (no sampling)",
    "warmup": "false: skip the warm-up stream at start",
    "max_rows": "decode rows per step (the largest row bucket; default 128)",
    "row_buckets": "captured row buckets, e.g. 1,2,4,8,16,32,64,96,128",
    "prefill_buckets": "captured prompt-token buckets per step, e.g. 64,256",
    "max_prefills": "new prompts per step (default 4)",
    "max_slots": "streams held at once, plus one (default 257; fewer if memory is short)",
    "max_positions": "KV positions per stream: prompt + frames (default 2560)",
    "kv_memory_fraction": "share of free GPU memory for stream slots (default 0.6)",
    "enforce_eager": "true: no CUDA graphs",
    "deadline_order": "false: rows round-robin instead of to the streams closest to a stall",
    "urgent_s": "decode pending frames early when a listener runs dry within this (default 0.15; 0: off)",
    "max_ahead_s": "a stream this far ahead of its listener gets no row (default 30)",
    "attention": "triton | torch | auto",
    "depth": "the depth loop's passes 1..14: layers (as the Talker's, default) | fused (five launches a layer; "
             "exact, but measured no faster on the H200)",
    "codec": "fused (Triton kernels, CUDA) | reference (plain PyTorch) | auto",
    "pipeline": "false: read each step before launching the next (default true: launch it first, host work overlaps)",
    "gil_switch_ms": "CPython's thread switch interval while the loop runs (default 0.5; 0 leaves it)",
    "text_min_tokens": "a stream whose text is still arriving starts after this many text tokens (default 4)",
}


def parse_flag(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected true or false, got {value!r}")


def parse_ints(value: Any) -> tuple[int, ...]:
    items = value if isinstance(value, (list, tuple)) else str(value).split(",")
    return tuple(int(x) for x in items)


def parse_buckets(value: Any) -> tuple[tuple[int, int], ...] | None:
    """"1x4,8x4" -> ((1, 4), (8, 4)); None or "" -> None (the default)."""
    if value is None or value == "":
        return None
    items = value if isinstance(value, (list, tuple)) else str(value).split(",")
    try:
        pairs = tuple(tuple(int(n) for n in (item.lower().split("x") if isinstance(item, str) else item))
                      for item in items)
    except ValueError:
        pairs = ((0,),)
    if any(len(p) != 2 or min(p) < 1 for p in pairs):
        raise ValueError(f"codec_buckets must be ROWSxFRAMES pairs, e.g. 1x4,8x4 (got {value!r})")
    return pairs  # type: ignore[return-value]

"""First audio of uploaded voices on a Base checkpoint (issue 16), at the engine, with `configs/qwen3tts.toml`'s
engine options: an in-context clone (x-vector + the reference's codes and transcript in the prompt) against an
x-vector-only clone of the same recording, idle and beside `--background` streams that keep the loop busy; also
how long making each voice took (`voice_prompt`: speaker and codec encoders on a side CUDA stream).

    python tests/qwen3tts/gpu_voice_ttfa.py --checkpoint /tmp/ckb17 --out results.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
from voxgate.engine.base import SynthesisRequest
from voxgate.engine.qwen3tts.engine import create_engine
from voxgate.gateway.config import load_config

TEXT = "Hello there, this is an uploaded voice speaking a short sentence."
REF_TEXT = "This is the reference transcript, read aloud for the recording."
SR = 24_000


async def _first_audio_ms(engine: Any, voice: str) -> float:
    t0 = time.perf_counter()
    stream = engine.open_stream(SynthesisRequest(text=TEXT, voice=voice, max_audio_ms=800))
    ms = float("nan")
    async for _ in stream:
        ms = (time.perf_counter() - t0) * 1000
        break
    stream.cancel()
    return ms


async def _background(engine: Any, stop: asyncio.Event) -> None:
    while not stop.is_set():
        stream = engine.open_stream(SynthesisRequest(text=TEXT * 2, voice="voice_xv", max_audio_ms=4000))
        async for _ in stream:
            if stop.is_set():
                stream.cancel()
                break


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    options = {k: str(v) for k, v in load_config("qwen3tts").engine_options.items()}
    options["model"] = args.checkpoint
    options |= dict(item.split("=", 1) for item in args.engine_option)
    engine = create_engine(**options)
    t0 = time.perf_counter()
    await engine.start()
    start_s = time.perf_counter() - t0
    recording = (0.1 * np.random.default_rng(0).standard_normal(int(SR * args.ref_s))).astype(np.float32)
    made = {}
    for voice, ref_text in (("voice_icl", REF_TEXT), ("voice_xv", None)):
        t0 = time.perf_counter()
        prompt = await asyncio.to_thread(engine.voice_prompt, recording, SR, ref_text)
        made[voice] = (time.perf_counter() - t0) * 1000
        engine.add_voice(voice, prompt, ref_text)
    results: dict[str, Any] = {"checkpoint": args.checkpoint, "engine_start_s": start_s, "ref_s": args.ref_s,
                               "voice_prompt_ms": made, "phases": {}}
    for phase, background in (("idle", 0), (f"beside {args.background} streams", args.background)):
        stop = asyncio.Event()
        tasks = [asyncio.create_task(_background(engine, stop)) for _ in range(background)]
        await asyncio.sleep(1.0 if background else 0)
        ttfa: dict[str, list[float]] = {"voice_icl": [], "voice_xv": []}
        for i in range(args.n + 2):  # two warm-up rounds, alternating voices
            for voice in ttfa:
                ms = await _first_audio_ms(engine, voice)
                if i >= 2:
                    ttfa[voice].append(ms)
        stop.set()
        await asyncio.gather(*tasks)
        summary = {v: {"p50": statistics.median(x), "max": max(x), "n": len(x)} for v, x in ttfa.items()}
        summary["icl_minus_xv_p50_ms"] = summary["voice_icl"]["p50"] - summary["voice_xv"]["p50"]
        results["phases"][phase] = summary
        print(phase, json.dumps(summary), flush=True)
    await engine.stop()
    return results


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--n", type=int, default=10)
    p.add_argument("--ref-s", type=float, default=5.0, help="the recording's length, seconds")
    p.add_argument("--background", type=int, default=32)
    p.add_argument("--engine-option", action="append", default=[], metavar="KEY=VALUE",
                   help="over the config's (a CPU dry run: device=cpu dtype=fp32 max_rows=8 ...)")
    args = p.parse_args()
    results = asyncio.run(measure(args))
    args.out.write_text(json.dumps(results, indent=1))
    print(json.dumps(results["voice_prompt_ms"]), f"engine start {results['engine_start_s']:.1f} s")


if __name__ == "__main__":
    main()

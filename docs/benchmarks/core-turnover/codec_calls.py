"""Codec calls a step in a closed loop, model-free (CPU): EngineCore over tests/engine_core_support.py's fake runner
on a simulated clock (each step takes STEP_MS), C streams of 25-50 frames (sentences: ~37 on average, as the H100's
c = 8 runs make them), each client sending its next request when the last one ends, the engine's codec buckets (1, 8,
16, 32, 64 rows of 4 frames) priced at their GPU ms timed at capture on an H100, the scheduler's defaults (urgent_s
0.15). Prints, per policy of engine/chunks.py's ChunkAssembler, the codec calls a step, their rows, the codec's
modeled GPU ms a step, the decode frames a step and the least audio any listener had left when a chunk reached it
(below zero: a pause).

    python docs/benchmarks/core-turnover/codec_calls.py [C] [STEP_MS] [SCHEDULES]

SCHEDULES (e.g. "1,2,4,8,16;1,3,8,16;2,6,16"): instead of the policies, the default policy once per chunk schedule
(the engine option `chunk_frames`; default 1,2,4,8,16).

What the codec's work a step costs the steps is measured on a GPU (docs/engine-loop.md: at c = 8 on an H100 a step in
the server takes ~4.6 ms against 4.09 alone); this says how many calls of which size the policy makes for it.
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests"))

from engine_core_support import FakeRunner, Pool, make_request
from voxgate.engine import chunks as chunks_module
from voxgate.engine.core import EngineCore
from voxgate.engine.scheduler import SchedulerConfig

STEPS, WARMUP = 6000, 1000
H100_CODEC_MS = {(1, 4): 0.93, (8, 4): 1.30, (16, 4): 1.88, (32, 4): 3.03, (64, 4): 5.29}  # at capture, 2026-12-06
FRAME_S = 0.08


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def run(streams: int, step_ms: float, fill: bool = True,
        schedule: tuple[int, ...] = (1, 2, 4, 8, 16)) -> dict[str, float]:
    clock = Clock()
    real = time.monotonic
    time.monotonic = clock  # the core's and the chunks' stamps (they call time.monotonic at each use)
    try:
        runner = FakeRunner(buckets=tuple(H100_CODEC_MS))
        runner.chunks.costs = dict(H100_CODEC_MS)
        core = EngineCore(runner, Pool(64), SchedulerConfig(max_rows=16, max_prefill_tokens=64),
                          codec_fill=fill)
        core.scheduler.clock = clock
        ended_early: list = []
        margins: list[float] = []

        def hand(chunks: list, finished: list) -> None:
            ended_early.extend(finished)
            margins.extend(_margins(chunks, clock.now))

        core.hand_over_early = hand
        rng = random.Random(7)
        due: dict[int, int] = {}

        def new_request():
            r = make_request(tokens=24, budget=rng.randint(25, 50), schedule=schedule)
            r.arrival = clock.now
            return r

        for _ in range(streams):
            core.add(new_request())
        frames, calls_before = [], 0
        for step in range(STEPS):
            if step == WARMUP:
                calls_before = len(runner.chunks.calls)
                margins.clear()
            for _ in range(due.pop(step, 0)):
                core.add(new_request())
            clock.now += step_ms / 1000
            out = core.step()
            margins.extend(_margins(out.chunks, clock.now))
            frames.append(out.num_frames)
            due[step + 1] = due.get(step + 1, 0) + len(ended_early) + len(out.finished)
            ended_early.clear()
        calls = runner.chunks.calls[calls_before:]
        steps = STEPS - WARMUP
        cost = sum(runner.chunks.costs[runner.chunks.bucket_for(len(c), max(n for _, n in c))] for c in calls)
        return {"calls": len(calls) / steps, "rows": sum(len(c) for c in calls) / max(1, len(calls)),
                "codec_ms": cost / steps, "frames": sum(frames[WARMUP:]) / steps, "least_left_s": min(margins)}
    finally:
        time.monotonic = real


def _margins(chunks: list, now: float) -> list[float]:
    """Audio each listener still had when a chunk reached it (its first chunk: none to count)."""
    out = []
    for request, pcm in chunks:
        if request.num_chunks > 1:
            before = request.num_delivered - len(pcm) // 1920
            out.append(request.first_audio_at + before * FRAME_S - now)
    return out


def main() -> None:
    streams = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    step_ms = float(sys.argv[2]) if len(sys.argv) > 2 else 4.6
    print(f"{streams} streams of 25-50 frames, closed loop, a step every {step_ms} ms; per step over the steady part:")
    if len(sys.argv) > 3:
        print("| chunk schedule (frames) | codec calls a step | rows a call | codec GPU ms a step (H100 model) |"
              " decode frames a step | least audio left at a chunk, s |")
        print("|---|---:|---:|---:|---:|---:|")
        for text in sys.argv[3].split(";"):
            r = run(streams, step_ms, schedule=tuple(int(f) for f in text.split(",")))
            print(f"| {text} | {r['calls']:.2f} | {r['rows']:.2f} | {r['codec_ms']:.2f} | {r['frames']:.2f} |"
                  f" {r['least_left_s']:.3f} |")
        return
    print("| policy | codec calls a step | rows a call | codec GPU ms a step (H100 model) | decode frames a step |"
          " least audio left at a chunk, s |")
    print("|---|---:|---:|---:|---:|---:|")
    default = (chunks_module.FULL_ENOUGH, chunks_module.WAIT_SLACK_S)
    policies = [("defaults (fill, 0.75 full, 0.5 s slack)", default, True),
                ("fill, full calls only (1.0)", (1.0, default[1]), True),
                ("fill, 0.25 s slack", (default[0], 0.25), True),
                ("fill, 1.0 full, 0.25 s slack", (1.0, 0.25), True),
                ("fill, 0.15 s slack (the urgent margin's own)", (default[0], 0.15), True),
                ("fill, 1.0 full, 0.15 s slack", (1.0, 0.15), True),
                ("no fill (every due piece each step)", default, False)]
    for name, (full, slack), fill in policies:
        chunks_module.FULL_ENOUGH, chunks_module.WAIT_SLACK_S = full, slack
        try:
            r = run(streams, step_ms, fill)
        finally:
            chunks_module.FULL_ENOUGH, chunks_module.WAIT_SLACK_S = default
        print(f"| {name} | {r['calls']:.2f} | {r['rows']:.2f} | {r['codec_ms']:.2f} | {r['frames']:.2f} |"
              f" {r['least_left_s']:.3f} |")


if __name__ == "__main__":
    main()

"""Rows a step kept busy in a closed loop, model-free (CPU): EngineCore over tests/engine_core_support.py's fake
runner, C streams of F frames each, every stream's client sending its next request when the last one ends. A step
is the unit of time: an end handed over before a step's GPU wait (`early_end`) reaches its client during that
step, so the next request joins the next step launched; one handed over after the wait joins the one after (a
client's answer takes less than a step, but not nothing). Prints the decode frames a step over the steady part.

    python docs/benchmarks/core-turnover/turnover.py [C] [F]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests"))

from engine_core_support import FakeRunner, Pool, make_request
from voxgate.engine.core import EngineCore
from voxgate.engine.scheduler import SchedulerConfig

STEPS, WARMUP = 4000, 500


def frames_a_step(streams: int, frames: int, early_end: bool, instant_client: bool) -> float:
    runner = FakeRunner(buckets=((16, 1), (16, 2), (16, 4), (16, 8), (8, 16)))
    core = EngineCore(runner, Pool(64), SchedulerConfig(max_rows=16, max_prefill_tokens=128, urgent_s=0),
                      early_end=early_end)
    ended_early: list = []
    core.hand_over_early = lambda chunks, finished: ended_early.extend(finished)
    due: dict[int, int] = {}  # step -> requests that arrive before it

    def new_request():
        return make_request(tokens=24, budget=frames, schedule=(1, 2, 4, 8, 16))

    for _ in range(streams):
        core.add(new_request())
    made = []
    for step in range(STEPS):
        for _ in range(due.pop(step, 0)):
            core.add(new_request())
        out = core.step()
        made.append(out.num_frames)
        late = 0 if instant_client else 1
        due[step + 1] = due.get(step + 1, 0) + len(ended_early)
        due[step + 1 + late] = due.get(step + 1 + late, 0) + len(out.finished)
        ended_early.clear()
    return sum(made[WARMUP:]) / (STEPS - WARMUP)


def main() -> None:
    streams = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    frames = int(sys.argv[2]) if len(sys.argv) > 2 else 36
    print(f"{streams} streams of {frames} frames, closed loop; decode frames a step (of {streams}):")
    for instant in (True, False):
        client = "a client that answers at once" if instant else "a client that answers within a step"
        off, on = (frames_a_step(streams, frames, e, instant) for e in (False, True))
        print(f"- {client}: early_end off {off:.2f}, on {on:.2f}")


if __name__ == "__main__":
    main()

"""Do two processes' kernels run side by side on this GPU? Each of N processes (spawned) queues the same small
kernels (torch.cuda._sleep: one block spinning for a number of clock cycles, so it needs almost none of the GPU)
after a shared barrier; their walls are compared with one process alone. Time-sliced contexts (no MPS) take about
N times as long together; under MPS, or streams of one process, about as long as one.

    python docs/benchmarks/h200-word-times/mps-probe/overlap.py [--procs 2] [--ms 400]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import time


def spin(ms: float, barrier: object, out: object, rank: int) -> None:
    import torch

    torch.cuda.init()
    torch.cuda._sleep(1000)
    torch.cuda.synchronize()
    start = time.perf_counter()
    torch.cuda._sleep(1_000_000)  # calibrate: ~1 M cycles
    torch.cuda.synchronize()
    per_cycle = (time.perf_counter() - start) / 1_000_000
    cycles = int(ms / 1000 / per_cycle / 20)
    barrier.wait()  # type: ignore[attr-defined]
    start = time.perf_counter()
    for _ in range(20):  # 20 kernels of ms / 20 each, queued back to back
        torch.cuda._sleep(cycles)
    torch.cuda.synchronize()
    out[rank] = time.perf_counter() - start  # type: ignore[index]


def run(procs: int, ms: float) -> list[float]:
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(procs), ctx.Array("d", procs)
    workers = [ctx.Process(target=spin, args=(ms, barrier, out, r)) for r in range(procs)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
    return list(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procs", type=int, default=2)
    parser.add_argument("--ms", type=float, default=400.0)
    args = parser.parse_args()
    alone = run(1, args.ms)[0]
    together = run(args.procs, args.ms)
    ratio = max(together) / alone
    verdict = "side by side" if ratio < 1.5 else "time-sliced" if ratio > 0.8 * args.procs else "partly overlapped"
    print(f"one process: {1000 * alone:.0f} ms; {args.procs} together: "
          f"{', '.join(f'{1000 * t:.0f}' for t in together)} ms; slowest / alone {ratio:.2f}: {verdict}")


if __name__ == "__main__":
    main()

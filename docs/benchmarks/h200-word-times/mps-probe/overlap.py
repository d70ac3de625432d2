"""Do two processes' kernels run side by side on this GPU? Each of N processes (spawned) queues the same kernels
after a shared barrier: one block of 4 warps, each thread a chain of dependent multiply-adds, so a kernel needs
almost none of the GPU and takes a fixed number of instructions; their walls are compared with one process alone.
Time-sliced contexts (no MPS) take about N times as long together; under MPS, or streams of one process, about as
long as one.

(The first version of this probe spun `torch.cuda._sleep`, which waits for the SM's clock to pass a count: a kernel
switched out by the time-slicer still ends on time once back, so it could not tell the two apart. Its run on an
H100, 2026-12-07: 1.04 without the MPS daemon, 0.97 with it. The second, this kernel, ran once with its count
specialized by Triton, so a calibration compiled a second kernel inside its timing: 569 / 528 ms together without
the daemon, 252 / 252 ms under it, its "alone" times off.)

    python docs/benchmarks/h200-word-times/mps-probe/overlap.py [--procs 2] [--ms 400]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import time

import triton
import triton.language as tl

KERNELS = 20  # a process's work: this many kernels of ms / KERNELS each, queued back to back


@triton.jit(do_not_specialize=["n"])  # one compiled kernel for every count: none compiles inside a timing
def _spin_kernel(x_ptr, n):
    offs = tl.arange(0, 128)
    acc = tl.load(x_ptr + offs)
    for _ in range(n):  # each step waits for the one before: a fixed count of instructions, no memory traffic
        acc = acc * 0.999 + 0.001
    tl.store(x_ptr + offs, acc)


def spin(ms: float, barrier: object, out: object, rank: int) -> None:
    import torch

    x = torch.zeros(128, device="cuda")
    _spin_kernel[(1,)](x, 1000)  # compiled and loaded before any timing
    torch.cuda.synchronize()
    start = time.perf_counter()
    _spin_kernel[(1,)](x, 1_000_000)  # calibrate: a million steps
    torch.cuda.synchronize()
    per_step = (time.perf_counter() - start) / 1_000_000
    steps = int(ms / 1000 / per_step / KERNELS)
    barrier.wait()  # type: ignore[attr-defined]
    start = time.perf_counter()
    for _ in range(KERNELS):
        _spin_kernel[(1,)](x, steps)
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

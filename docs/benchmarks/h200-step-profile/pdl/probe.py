"""Does Hopper's programmatic dependent launch (PDL) take the launch gaps out of a captured depth loop? A probe for
the H200, run before any kernel of the engine is changed for it (issue 27).

The depth loop's passes 1..14 at 8 rows are ~280 GEMV-shaped projections a step (5 layers x q|k|v, o, gate|up,
down; the code predictor of the 1.7B: widths 1,024 -> 4,096, 2,048 -> 1,024, 1,024 -> 6,144, 3,072 -> 1,024, bf16)
and each is a few us of weights behind a launch. This chains exactly those 280 projections, each reading the one
before (o the first 2,048 columns of q|k|v, down the first 3,072 of gate|up), in one CUDA graph, four ways:

- cuBLAS (F.linear), as the `layers` loop runs them;
- a plain Triton GEMV tile kernel (16-row MMA block, 32 columns a program, K in tiles of 128);
- the same kernel launched with PDL (`launch_pdl`): each program lets the next kernel launch at once
  (`gdc_launch_dependents`) and waits for the one before only where it first reads its output (`gdc_wait`);
- PDL, and before that wait each program sends its own weight tile toward L2 (`prefetch.global.L2`), so the weights
  stream while the kernel before it finishes.

It prints the replay time of each chain (median of 50, after 5), its time per projection, and the largest
difference from the plain Triton chain (PDL must not change a bit) and from cuBLAS (fp32 sum orders). If PDL is
not honoured in a captured graph the PDL rows equal the plain one; if Triton here has no PDL, it says so.

    python docs/benchmarks/h200-step-profile/pdl/probe.py [--rows 8] [--passes 14]
"""

from __future__ import annotations

import argparse
import statistics

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

try:
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
except ImportError:  # an older Triton: the probe reports it
    gdc_launch_dependents = gdc_wait = None

from voxgate.kernels.utils import prefetch_tiles

SHAPES = ((4096, 1024), (1024, 2048), (6144, 1024), (1024, 3072))  # (N, K): q|k|v, o, gate|up, down
BN, BK, BLOCK_M, LINE = 32, 128, 16, 64


@triton.jit
def _gemv(x_ptr, w_ptr, y_ptr, R, x_stride, N: tl.constexpr, K: tl.constexpr, BN: tl.constexpr,
          BK: tl.constexpr, BLOCK_M: tl.constexpr, PDL: tl.constexpr, PREFETCH: tl.constexpr,
          LINE: tl.constexpr, LINES: tl.constexpr):
    # y [R, N] = x[:, :K] @ w^T, w [N, K]; program pid: columns pid * BN ...
    pid = tl.program_id(0)
    if PDL:
        gdc_launch_dependents()  # the next kernel may launch now: it waits for this one where it reads y
        if PREFETCH:
            prefetch_tiles(w_ptr, N // BN, K, BN, LINE, LINES, pid, tl.num_programs(0))
        gdc_wait()  # x is the kernel before's output
    rows = tl.arange(0, BLOCK_M)
    cols = pid * BN + tl.arange(0, BN)
    ks = tl.arange(0, BK)
    acc = tl.zeros((BLOCK_M, BN), tl.float32)
    for k0 in range(0, K, BK):
        a = tl.load(x_ptr + rows[:, None] * x_stride + k0 + ks[None, :], mask=(rows < R)[:, None], other=0.0)
        w = tl.load(w_ptr + cols[:, None] * K + k0 + ks[None, :])
        acc += tl.dot(a, tl.trans(w))
    tl.store(y_ptr + rows[:, None] * N + cols[None, :], acc.to(y_ptr.dtype.element_ty), mask=(rows < R)[:, None])


def chain(x: torch.Tensor, weights: list[torch.Tensor], outs: list[torch.Tensor], mode: str) -> torch.Tensor:
    """The projections one after the other, each reading the one before's output (its first K columns)."""
    h = x
    for w, y in zip(weights, outs, strict=True):
        n, k = w.shape
        src = h[:, :k]
        if mode == "cublas":
            y.copy_(F.linear(src, w))
        else:
            pdl, prefetch = mode != "triton", mode == "pdl+prefetch"
            extra = dict(launch_pdl=True) if pdl else {}
            _gemv[(n // BN,)](src, w, y, x.shape[0], h.stride(0), N=n, K=k, BN=BN, BK=BK, BLOCK_M=BLOCK_M,
                              PDL=pdl, PREFETCH=prefetch, LINE=LINE, LINES=triton.next_power_of_2(k // LINE),
                              num_warps=4, **extra)
        h = y
    return h


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=8)
    p.add_argument("--passes", type=int, default=14)
    p.add_argument("--layers", type=int, default=5)
    args = p.parse_args()
    dev = torch.device("cuda")
    torch.manual_seed(0)
    weights = [torch.randn(n, k, device=dev, dtype=torch.bfloat16) / k ** 0.5
               for _ in range(args.layers) for n, k in SHAPES]  # one layer stack, re-read by every pass
    weights = weights * args.passes
    x = torch.randn(args.rows, 1024, device=dev, dtype=torch.bfloat16)
    modes = ["cublas", "triton"] + (["pdl", "pdl+prefetch"] if gdc_wait is not None else [])
    if gdc_wait is None:
        print("this Triton has no triton.language.extra.cuda.gdc_wait: no PDL rows")
    results = {}
    for mode in modes:
        outs = [torch.empty(args.rows, w.shape[0], device=dev, dtype=torch.bfloat16) for w in weights]
        try:
            for _ in range(3):  # compile and warm up outside the capture
                chain(x, weights, outs, mode)
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                last = chain(x, weights, outs, mode)
        except Exception as exc:  # e.g. launch_pdl unknown to this Triton, or not capturable
            print(f"{mode:14s} failed: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
            continue
        times = []
        for i in range(55):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            torch.cuda.synchronize()
            if i >= 5:
                times.append(start.elapsed_time(end) * 1e3)
        results[mode] = (statistics.median(times), last.float().clone())
    base = results.get("triton")
    print(f"{len(weights)} projections at {args.rows} rows, one CUDA graph (torch {torch.__version__}, "
          f"triton {triton.__version__})")
    for mode, (us, out) in results.items():
        diff = (out - base[1]).abs().max().item() if base else float("nan")
        print(f"{mode:14s} {us:9.1f} us a chain  {us / len(weights):6.2f} us a projection  "
              f"max diff from triton {diff:.3g}")


if __name__ == "__main__":
    main()

"""What one dependent kernel costs inside a CUDA graph, by the bytes it reads: the floor under every plan for issue 27's
1-row step (~820 dependent kernels, ~4-6 us each whatever their bytes). Run it where voxgate and CUDA are
(`python chain.py`); it prints one table, the record of a run.

Each line replays one CUDA graph of COUNT kernels, each reading its own weight (COUNT x size > 2x L2, so every read
comes from HBM as in the depth loop), each depending on the one before:

- `empty`: a one-program Triton kernel that reads one value of the previous output and writes one: the graph's
  launch-to-launch floor, no bytes.
- `stream`: a Triton kernel whose programs each load their whole share of the weight in one `tl.load` (no loop) and
  write one partial sum: the floor of a kernel that reads that many bytes, all in flight at once.
- `F.linear`: cuBLAS's GEMV of the weight as a square matrix, at 1 and 8 rows (each output the next input): what
  the step runs today.

Expected if a dependent kernel is launch latency plus bytes at full bandwidth: empty ~2 us, and stream ~ empty +
size / 3.3-4.8 TB/s. If `stream` stays ~4-6 us at 4-12 MB, a phase-per-kernel (or per barrier) plan cannot beat
today's step by much; the weights must stream ahead of the dependency chain instead (a persistent pass whose next
phases' weights are in flight while the current one computes).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

SIZES_MB = (0.5, 2, 4, 8, 12.6)  # the predictor's projections: o 4, q|k|v 8, gate|up 12.6 MB (bf16)
PER_PROGRAM = 8192  # bf16 values a `stream` program loads at once (16 KB: 32 a thread at 8 warps, no spills)


@triton.jit
def _empty_kernel(src, dst):
    tl.store(dst, tl.load(src) + 1.0)


@triton.jit
def _stream_kernel(w_ptr, dep_ptr, out_ptr, per_program, BLOCK: tl.constexpr):
    # Program p sums w[p * per_program : +per_program] (BLOCK >= per_program, masked) plus dep[0], into out[p].
    p = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    w = tl.load(w_ptr + p.to(tl.int64) * per_program + offs, mask=offs < per_program, other=0.0).to(tl.float32)
    tl.store(out_ptr + p, tl.sum(w, 0) + tl.load(dep_ptr))


def stream(w: torch.Tensor, dep: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """out[p] = sum of program p's share of w (flat) + dep[0]; the plain check is `stream_ref`."""
    per = triton.cdiv(w.numel(), out.numel())
    assert per <= PER_PROGRAM, (w.numel(), out.numel())
    _stream_kernel[(out.numel(),)](w, dep, out, per, BLOCK=triton.next_power_of_2(per), num_warps=8)
    return out


def stream_ref(w: torch.Tensor, dep: torch.Tensor, programs: int) -> torch.Tensor:
    per = -(-w.numel() // programs)
    flat = torch.nn.functional.pad(w.flatten().float(), (0, per * programs - w.numel()))
    return flat.view(programs, per).sum(1) + dep[0].float()


def _graph_us(body, count: int) -> float:
    body()  # compile and warm up outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        body()
    ms = triton.testing.do_bench(graph.replay, warmup=20, rep=200)
    return ms * 1e3 / count


def main() -> None:
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    l2 = getattr(props, "L2_cache_size", 50 << 20)
    print(f"{props.name}, L2 {l2 >> 20} MiB, {props.multi_processor_count} SMs; us a kernel in a chain of dependent "
          f"kernels replayed from one CUDA graph\n")
    print("| weight MB | kernels | empty | stream (TB/s) | F.linear 1 row (TB/s) | F.linear 8 rows (TB/s) |")
    print("|---:|---:|---:|---:|---:|---:|")
    for size in SIZES_MB:
        print(table_row(size, dev, l2), flush=True)


def table_row(size: float, dev: torch.device, l2: int) -> str:
    """One weight size's line: us a kernel for the empty, stream and F.linear chains."""
    side = max(64, round((size * 2**20 / 2) ** 0.5 / 64) * 64)  # a square weight of about `size` MB
    bytes_ = side * side * 2
    count = max(16, min(96, int(2.2 * l2 / bytes_) + 1))
    weights = [(torch.randn(side, side, device=dev) / side**0.5).to(torch.bfloat16) for _ in range(count)]
    sums = [torch.zeros(triton.cdiv(side * side, PER_PROGRAM), device=dev) for _ in range(2)]  # each reads the other
    one = [torch.zeros(1, device=dev) for _ in range(2)]

    def empty() -> None:
        for i in range(count):
            _empty_kernel[(1,)](one[i % 2], one[1 - i % 2])

    def streamed() -> None:
        for i, w in enumerate(weights):
            stream(w, sums[i % 2], sums[1 - i % 2])

    def gemvs(rows: int) -> float:
        x0 = torch.randn(rows, side, device=dev).to(torch.bfloat16)

        def chain() -> None:
            x = x0
            for w in weights:
                x = F.linear(x, w)
        return _graph_us(chain, count)

    us = [_graph_us(empty, count), _graph_us(streamed, count), gemvs(1), gemvs(8)]
    rate = [bytes_ / (t * 1e-6) / 1e12 for t in us[1:]]
    return (f"| {bytes_ / 2**20:.1f} | {count} | {us[0]:.2f} | {us[1]:.2f} ({rate[0]:.2f}) | {us[2]:.2f} "
            f"({rate[1]:.2f}) | {us[3]:.2f} ({rate[2]:.2f}) |")


if __name__ == "__main__":
    main()

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
- `GEMV`: a one-row Triton GEMV of the same chain, each program loading its rows whole (no K loop); `GEMV PDL`
  the same kernel launched with programmatic dependent launch (Hopper): it lets the next kernel start at once
  and loads its weight rows *before* `gdc_wait` (the wait for the previous kernel's output), so the weights of
  kernel i + 1 stream while kernel i computes. `empty PDL` and `stream PDL` are the other two chains so launched.
- `GEMV PDL released after the wait`: the same, but each kernel lets the next one start only after its own wait, so
  at most one kernel's weights stream ahead (the column before lets kernels release the next before waiting, so
  several can be loading at once; the PDL probe of 2026-12-05 released at each program's start).
- `gemv 8 rows`: voxgate's own kernels/gemv.py at 8 rows (its MMA 2-16-row kernel where K <= 2,048, else
  the one-row kernel's plan), plain and with PDL, beside cuBLAS's 8 rows (needs voxgate on PYTHONPATH; "-" without it).

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

try:  # Hopper's grid dependency control (Triton >= 3.3)
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
except ImportError:  # pragma: no cover - older Triton: the PDL columns print "-"
    gdc_launch_dependents = gdc_wait = None

SIZES_MB = (0.5, 2, 4, 8, 12.6)  # the predictor's projections: o 4, q|k|v 8, gate|up 12.6 MB (bf16)
PER_PROGRAM = 8192  # bf16 values a `stream` program loads at once (16 KB: 32 a thread at 8 warps, no spills)


@triton.jit
def _empty_kernel(src, dst):
    tl.store(dst, tl.load(src) + 1.0)


@triton.jit
def _empty_pdl_kernel(src, dst):
    gdc_launch_dependents()
    gdc_wait()
    tl.store(dst, tl.load(src) + 1.0)


@triton.jit
def _stream_kernel(w_ptr, dep_ptr, out_ptr, per_program, BLOCK: tl.constexpr, PDL: tl.constexpr):
    # Program p sums w[p * per_program : +per_program] (BLOCK >= per_program, masked) plus dep[0], into out[p].
    p = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    w = tl.load(w_ptr + p.to(tl.int64) * per_program + offs, mask=offs < per_program, other=0.0).to(tl.float32)
    if PDL:  # the weight is read; now wait for the previous kernel's output
        gdc_launch_dependents()
        gdc_wait()
    tl.store(out_ptr + p, tl.sum(w, 0) + tl.load(dep_ptr))


def stream(w: torch.Tensor, dep: torch.Tensor, out: torch.Tensor, pdl: bool = False) -> torch.Tensor:
    """out[p] = sum of program p's share of w (flat) + dep[0]; the plain check is `stream_ref`."""
    per = triton.cdiv(w.numel(), out.numel())
    assert per <= PER_PROGRAM, (w.numel(), out.numel())
    extra = {"launch_pdl": True} if pdl else {}
    _stream_kernel[(out.numel(),)](w, dep, out, per, BLOCK=triton.next_power_of_2(per), PDL=pdl, num_warps=8, **extra)
    return out


@triton.jit
def _gemv_kernel(w_ptr, x_ptr, y_ptr, K, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PDL: tl.constexpr,
                 RELEASE_LATE: tl.constexpr):
    # y[n] = sum_k w[n, k] x[k] for this program's BLOCK_N rows, each row loaded whole (BLOCK_K >= K, masked).
    # RELEASE_LATE: the next kernel may start only once this one has waited (one kernel of lookahead, not a cascade
    # of kernels each releasing the next before its own wait).
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, BLOCK_K)
    w = tl.load(w_ptr + rows[:, None].to(tl.int64) * K + cols[None, :], mask=cols[None, :] < K, other=0.0)
    if PDL:
        if RELEASE_LATE:
            gdc_wait()
            gdc_launch_dependents()
        else:
            gdc_launch_dependents()
            gdc_wait()
    x = tl.load(x_ptr + cols, mask=cols < K, other=0.0).to(tl.float32)
    y = tl.sum(w.to(tl.float32) * x[None, :], 1)
    tl.store(y_ptr + rows, y.to(y_ptr.dtype.element_ty))


def gemv(w: torch.Tensor, x: torch.Tensor, y: torch.Tensor, pdl: bool = False, late: bool = False) -> torch.Tensor:
    """y = w @ x for a square bf16 weight whose side divides by the rows a program takes; checked against F.linear."""
    n, k = w.shape
    block_n = max(1, PER_PROGRAM // triton.next_power_of_2(k))
    assert n % block_n == 0, (n, block_n)
    extra = {"launch_pdl": True} if pdl else {}
    _gemv_kernel[(n // block_n,)](w, x, y, k, BLOCK_N=block_n, BLOCK_K=triton.next_power_of_2(k), PDL=pdl,
                                  RELEASE_LATE=late, num_warps=8, **extra)
    return y


def stream_ref(w: torch.Tensor, dep: torch.Tensor, programs: int) -> torch.Tensor:
    per = -(-w.numel() // programs)
    flat = torch.nn.functional.pad(w.flatten().float(), (0, per * programs - w.numel()))
    return flat.view(programs, per).sum(1) + dep[0].float()


def _graph_us(body, count: int) -> float:
    side = torch.cuda.Stream()  # warmed up and captured on one stream, as engine/graphs.py does
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        body()  # compile and warm up outside the capture (split-K launches make their scratch here)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        body()
    ms = triton.testing.do_bench(graph.replay, warmup=20, rep=200)
    return ms * 1e3 / count


def main() -> None:
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    l2 = getattr(props, "L2_cache_size", 50 << 20)
    print(f"{props.name}, L2 {l2 >> 20} MiB, {props.multi_processor_count} SMs; us a kernel in a chain of dependent "
          f"kernels replayed from one CUDA graph\n")
    print("| weight MB | kernels | empty | empty PDL | stream (TB/s) | stream PDL (TB/s) | F.linear 1 row (TB/s) "
          "| F.linear 8 rows (TB/s) | GEMV 1 row (TB/s) | GEMV PDL 1 row (TB/s) | gemv 8 rows (TB/s) "
          "| gemv 8 rows PDL (TB/s) | GEMV PDL released after the wait (TB/s) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
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

    def empty_pdl() -> None:
        for i in range(count):
            _empty_pdl_kernel[(1,)](one[i % 2], one[1 - i % 2], launch_pdl=True)

    def streamed(pdl: bool):
        def body() -> None:
            for i, w in enumerate(weights):
                stream(w, sums[i % 2], sums[1 - i % 2], pdl)
        return body

    def gemvs(rows: int) -> float:
        x0 = torch.randn(rows, side, device=dev).to(torch.bfloat16)

        def chain() -> None:
            x = x0
            for w in weights:
                x = F.linear(x, w)
        return _graph_us(chain, count)

    xs = [torch.randn(side, device=dev).to(torch.bfloat16) / 4 for _ in range(2)]

    def triton_gemvs(pdl: bool, late: bool = False) -> float:
        # Checked once against F.linear (one weight, a fresh input: the chains before leave xs at any size,
        # inf or NaN), then timed as a chain.
        x = torch.randn(side, device=dev).to(torch.bfloat16) / 4
        got = gemv(weights[0], x, torch.empty_like(x), pdl, late)
        want = F.linear(x.float(), weights[0].float())
        assert torch.allclose(got.float(), want, rtol=2e-2, atol=2e-2), (got.float() - want).abs().max()

        def chain() -> None:
            for i, w in enumerate(weights):
                gemv(w, xs[i % 2], xs[1 - i % 2], pdl, late)
        return _graph_us(chain, count)

    def maybe(fn, *args) -> float | None:
        if gdc_wait is None:
            return None
        try:
            return fn(*args)
        except Exception as exc:  # a Triton or driver without PDL: the table says why
            print(f"<!-- PDL failed: {type(exc).__name__}: {str(exc).splitlines()[0][:120]} -->")
            return None

    def voxgate_gemvs(rows: int, pdl: bool) -> float | None:
        try:
            from voxgate.kernels.gemv import gemv as vx_gemv
        except ImportError:
            return None
        xs8 = [torch.randn(rows, side, device=dev).to(torch.bfloat16) / 4 for _ in range(2)]  # check, chain
        got = vx_gemv(xs8[0], weights[0], pdl=pdl)
        want = F.linear(xs8[0].float(), weights[0].float())
        assert torch.allclose(got.float(), want, rtol=2e-2, atol=2e-2), (got.float() - want).abs().max()

        def chain() -> None:
            x = xs8[1]
            for w in weights:
                x = vx_gemv(x, w, pdl=pdl)  # each output the next input
        return _graph_us(chain, count)

    plain = [_graph_us(empty, count), _graph_us(streamed(False), count), gemvs(1), gemvs(8), triton_gemvs(False),
             voxgate_gemvs(8, False)]
    pdl = [maybe(_graph_us, empty_pdl, count), maybe(_graph_us, streamed(True), count), maybe(triton_gemvs, True),
           maybe(voxgate_gemvs, 8, True), maybe(triton_gemvs, True, True)]
    us = [plain[0], pdl[0], plain[1], pdl[1], plain[2], plain[3], plain[4], pdl[2], plain[5], pdl[3], pdl[4]]

    def cell(t: float | None, rate: bool = True) -> str:
        if t is None:
            return "-"
        return f"{t:.2f} ({bytes_ / (t * 1e-6) / 1e12:.2f})" if rate else f"{t:.2f}"

    cells = [cell(us[0], False), cell(us[1], False)] + [cell(t) for t in us[2:]]
    return f"| {bytes_ / 2**20:.1f} | {count} | " + " | ".join(cells) + " |"


if __name__ == "__main__":
    main()

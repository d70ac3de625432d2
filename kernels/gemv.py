"""y = x @ W^T (+ bias) for a few rows (M <= 16): the code predictor's projections at 1-16 rows, where cuBLAS runs
~4x off the memory bandwidth (docs/benchmarks/h200-step-profile). A GEMV of M rows is bound by reading W once, so
each program loads a [BLOCK_N, BLOCK_K] tile of W once and multiplies it by every row (fp32 FMAs, no tl.dot: M is
too small for an MMA tile to pay), into per-thread partial sums [BLOCK_M, BLOCK_N, BLOCK_K] that are reduced over K
once, after the loop (reduced every step, the loop was ~16x the instructions, most of them warp shuffles).

When the output columns alone give too few programs to keep every SM streaming (down_proj: N = 1,024 over K =
3,072), K is split: each program writes the fp32 partial sum of its K range into a workspace [split, M, N], and a
second launch adds the partials in split order and rounds. No atomics, so the result is bitwise repeatable, and the
launch shapes depend only on (M, N, K): capturable in a CUDA graph, with nothing tuned at run time.

Rounding is F.linear's: the fp32 sum (plus the bias, in fp32) rounded once to x's dtype.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from .utils import SUM

MAX_ROWS = 16  # callers take F.linear above this
# Programs a launch aims for: ~4 resident on each of the H200's 132 SMs, so each has several weight tiles in
# flight. A constant, not the device's count, so the split (and so the result's bits) is the same on every GPU.
TARGET_PROGRAMS = 512
# fp32 partial sums a program holds ([BLOCK_M, BLOCK_N, BLOCK_K]): 64 per thread at the warps below.
PRODUCTS = 8192


@triton.jit
def _gemv_kernel(x_ptr, w_ptr, bias_ptr, out_ptr, M, N, K, k_per_split,
                 HAS_BIAS: tl.constexpr, SPLIT: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    # x [M, K], w [N, K] contiguous. SPLIT: out is the fp32 workspace [split, M, N] and this program sums K range
    # [pid_k * k_per_split, +k_per_split) (a multiple of BLOCK_K); else out [M, N] in x's dtype.
    # grid: (cdiv(N, BLOCK_N), split).
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    rows = tl.arange(0, BLOCK_M)
    cols = pid_n.to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    row_ok = rows < M
    col_ok = cols < N
    k_start = pid_k * k_per_split
    k_end = tl.minimum(k_start + k_per_split, K)
    x_rows = x_ptr + rows[:, None].to(tl.int64) * K
    w_rows = w_ptr + cols[:, None] * K
    acc3 = tl.full((BLOCK_M, BLOCK_N, BLOCK_K), 0.0, tl.float32)  # reduced over K once, after the loop
    for k0 in range(k_start, k_end, BLOCK_K):
        k_ok = (k0 + ks) < K  # ranges are whole BLOCK_K steps: only the last one ends inside a step
        w = tl.load(w_rows + k0 + ks[None, :], mask=col_ok[:, None] & k_ok[None, :], other=0.0).to(tl.float32)
        a = tl.load(x_rows + k0 + ks[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0.0).to(tl.float32)
        acc3 += a[:, None, :] * w[None, :, :]  # the one weight tile, times every row
    acc = tl.reduce(acc3, 2, SUM)
    offs = rows[:, None].to(tl.int64) * N + cols[None, :]
    mask = row_ok[:, None] & col_ok[None, :]
    if SPLIT:
        tl.store(out_ptr + pid_k.to(tl.int64) * M * N + offs, acc, mask=mask)
    else:
        if HAS_BIAS:
            acc += tl.load(bias_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
        tl.store(out_ptr + offs, acc.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _gemv_reduce_kernel(part_ptr, bias_ptr, out_ptr, MN, N, split, HAS_BIAS: tl.constexpr, BLOCK: tl.constexpr):
    # part [split, M, N] fp32 -> out [M, N] = sum over split, in split order (+ bias), rounded once.
    # grid: cdiv(M * N, BLOCK).
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ok = i < MN
    acc = tl.full((BLOCK,), 0.0, tl.float32)
    for s in range(split):
        acc += tl.load(part_ptr + s * MN + i, mask=ok, other=0.0)
    if HAS_BIAS:
        acc += tl.load(bias_ptr + i % N, mask=ok, other=0.0).to(tl.float32)
    tl.store(out_ptr + i, acc.to(out_ptr.dtype.element_ty), mask=ok)


@dataclass(frozen=True, slots=True)
class Tiles:
    """One launch's shape: BLOCK_N, BLOCK_K, the number of K ranges (1: no split) and warps."""

    block_n: int
    block_k: int
    split: int
    warps: int = 4


def tiles(m: int, n: int, k: int) -> Tiles:
    """The launch for x [m, k] @ W[n, k]^T, from a fixed rule (no autotuning: a graph capture must not tune).

    - BLOCK_K = 64: a 128-byte segment of each bf16 weight row per load, so every load is whole cache lines.
    - BLOCK_N = PRODUCTS / (BLOCK_M * BLOCK_K), within 16..128: 128 columns at 1 row, 16 at 8-16 rows, so a
      program's [BLOCK_M, BLOCK_N, BLOCK_K] partial sums stay 64 a thread (8 warps at 16 rows; compiled for sm_90,
      101-155 registers and no spills).
    - split: as many K ranges as bring cdiv(n, BLOCK_N) programs up to TARGET_PROGRAMS, at least one BLOCK_K step
      each, then as few ranges as cover K at that length (none empty). 1.7B predictor at 1 row: q|k|v (N 4,096)
      16 ranges of 64, o_proj (K 2,048, N 1,024) 32, gate|up (N 6,144) 8 of 128, down (K 3,072) 48; at 16 rows
      q|k|v 2, gate|up 1, down 8.
    """
    block_m = triton.next_power_of_2(max(m, 1))
    block_k = 64
    block_n = max(16, min(128, PRODUCTS // (block_m * block_k)))
    warps = max(4, block_m * block_n * block_k // 2048)
    programs = triton.cdiv(n, block_n)
    steps = triton.cdiv(k, block_k)
    split = min(steps, max(1, TARGET_PROGRAMS // programs))
    per_split = triton.cdiv(steps, split)
    return Tiles(block_n, block_k, triton.cdiv(steps, per_split), warps)


def _check(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
    assert x.dim() == 2 and x.is_contiguous() and weight.is_contiguous(), (x.shape, x.stride(), weight.stride())
    assert weight.dim() == 2 and weight.shape[1] == x.shape[1] and weight.dtype == x.dtype, (x.shape, weight.shape)
    assert x.dtype in (torch.bfloat16, torch.float16, torch.float32), x.dtype
    assert x.shape[0] <= MAX_ROWS, f"gemv takes at most {MAX_ROWS} rows, not {x.shape[0]}: use F.linear"
    assert bias is None or (bias.shape == (weight.shape[0],) and bias.dtype == x.dtype), bias


def gemv(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
         launch: Tiles | None = None) -> torch.Tensor:
    """x [M, K] (M <= 16), weight [N, K], bias [N] or None -> [M, N] in x's dtype. `launch` overrides the rule's
    tiles (tests)."""
    _check(x, weight, bias)
    m, k = x.shape
    n = weight.shape[0]
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if m == 0 or n == 0:
        return out
    t = launch or tiles(m, n, k)
    per_split = triton.cdiv(triton.cdiv(k, t.block_k), t.split) * t.block_k
    split = triton.cdiv(k, per_split)  # ranges actually needed (an override may ask for more than K has)
    block_m = triton.next_power_of_2(m)
    has_bias = bias is not None
    bias_arg = bias if has_bias else x
    if split == 1:
        _gemv_kernel[(triton.cdiv(n, t.block_n), 1)](
            x, weight, bias_arg, out, m, n, k, per_split, HAS_BIAS=has_bias, SPLIT=False, BLOCK_M=block_m,
            BLOCK_N=t.block_n, BLOCK_K=t.block_k, num_warps=t.warps)
        return out
    partials = torch.empty((split, m, n), dtype=torch.float32, device=x.device)
    _gemv_kernel[(triton.cdiv(n, t.block_n), split)](
        x, weight, bias_arg, partials, m, n, k, per_split, HAS_BIAS=False, SPLIT=True, BLOCK_M=block_m,
        BLOCK_N=t.block_n, BLOCK_K=t.block_k, num_warps=t.warps)
    block = 1024
    _gemv_reduce_kernel[(triton.cdiv(m * n, block),)](partials, bias_arg, out, m * n, n, split, HAS_BIAS=has_bias,
                                                      BLOCK=block, num_warps=4)
    return out


def gemv_ref(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
             launch: Tiles | None = None) -> torch.Tensor:
    """The same as F.linear (what cuBLAS runs); `launch` is ignored."""
    _check(x, weight, bias)
    return F.linear(x, weight, bias)

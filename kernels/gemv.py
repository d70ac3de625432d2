"""y = x @ W^T (+ bias) for a few rows (M <= 16), or the same added into a residual in place (x_res += a @ W^T): the
projections of the depth loop and of one-stream steps, where cuBLAS runs a dependent chain of GEMVs at ~1.2-1.6 TB/s
(docs/benchmarks/h200-step-profile/chain). A GEMV of M rows is bound by reading W once, and in a chain of dependent
kernels by how fast each read ramps up, so each program loads its whole tile of W, [BLOCK_N, K], in one load: no K
loop, every byte it needs in flight at once (8,192 values a program, 32 a thread at 8 warps). Then it multiplies the
tile by each row of x in turn (fp32 FMAs and one reduction a row: M is too small for an MMA tile to pay) and stores
each row's BLOCK_N outputs. The columns alone give enough programs (BLOCK_N shrinks to 1 before the count drops
under MIN_PROGRAMS), so nothing splits K: one launch, and the same bits on every GPU.

With `pdl` (Hopper: programmatic dependent launch, kernels/utils.py) the weight load comes before the wait for the
kernel ahead: in a chain of projections each one's weights stream in while the one before it computes.

Rounding is F.linear's: the fp32 sum (plus the bias, plus the residual, in fp32) rounded once to x's dtype, as
cuBLAS's addmm with beta = 1 rounds the residual add.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from .utils import SUM, pdl_launch, wait_for_inputs

MAX_ROWS = 16  # callers take F.linear above this
MAX_K = 8192  # a program holds whole rows of W: callers take F.linear above this (the Talker's widest K is 6,144)
PER_PROGRAM = 8192  # weight values a program loads at once (BLOCK_N x BLOCK_K)
MIN_PROGRAMS = 256  # ~2 a SM of the H100's / H200's 132: fewer, and too few bytes are in flight


@triton.jit
def _gemv_kernel(x_ptr, w_ptr, bias_ptr, res_ptr, out_ptr, M, N, K,
                 HAS_BIAS: tl.constexpr, ADD: tl.constexpr, PDL: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    # x [M, K], w [N, K] contiguous; out [M, N] (ADD: out = res + x @ w^T, res [M, N], may be out itself).
    # grid: cdiv(N, BLOCK_N); BLOCK_K >= K.
    cols = tl.program_id(0).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    col_ok = cols < N
    k_ok = ks < K
    w = tl.load(w_ptr + cols[:, None] * K + ks[None, :], mask=col_ok[:, None] & k_ok[None, :], other=0.0)
    wait_for_inputs(PDL)  # the weight needs nothing from the kernel ahead; x, bias and res may
    w = w.to(tl.float32)
    if HAS_BIAS:
        bias = tl.load(bias_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    for m in tl.static_range(BLOCK_M):
        x_ok = k_ok & (ks * 0 + m < M)  # rows past M (BLOCK_M is a power of two) load and store nothing
        out_ok = col_ok & (cols * 0 + m < M)
        x = tl.load(x_ptr + m * K + ks, mask=x_ok, other=0.0).to(tl.float32)
        y = tl.reduce(w * x[None, :], 1, SUM)
        if HAS_BIAS:
            y += bias
        if ADD:
            y += tl.load(res_ptr + m * N + cols, mask=out_ok, other=0.0).to(tl.float32)
        tl.store(out_ptr + m * N + cols, y.to(out_ptr.dtype.element_ty), mask=out_ok)


@dataclass(frozen=True, slots=True)
class Tiles:
    """One launch's shape: output columns a program takes, its K block (>= K) and warps."""

    block_n: int
    block_k: int
    warps: int


def tiles(n: int, k: int) -> Tiles:
    """The launch for W [n, k], from a fixed rule (no autotuning: a graph capture must not tune).

    - BLOCK_K = K rounded up to a power of two: each program reads whole rows of W.
    - BLOCK_N = PER_PROGRAM / BLOCK_K, halved (down to 1) while the programs number fewer than MIN_PROGRAMS.
    - warps: 32 weight values a thread, 1 to 8.
    1.7B code predictor: q|k|v (K 1,024, N 4,096) 8 columns, 512 programs; o (2,048 -> 1,024) 4, 256; gate|up
    (1,024 -> 6,144) 8, 768; down (3,072 -> 1,024) 2, 512; a head (1,024 -> 2,048) 8, 256.
    """
    block_k = triton.next_power_of_2(max(k, 1))
    block_n = max(1, PER_PROGRAM // block_k)
    while block_n > 1 and triton.cdiv(n, block_n) < MIN_PROGRAMS:
        block_n //= 2
    return Tiles(block_n, block_k, max(1, min(8, block_n * block_k // 1024)))


def _check(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
    assert x.dim() == 2 and x.is_contiguous() and weight.is_contiguous(), (x.shape, x.stride(), weight.stride())
    assert weight.dim() == 2 and weight.shape[1] == x.shape[1] and weight.dtype == x.dtype, (x.shape, weight.shape)
    assert x.dtype in (torch.bfloat16, torch.float16, torch.float32), x.dtype
    assert x.shape[0] <= MAX_ROWS, f"gemv takes at most {MAX_ROWS} rows, not {x.shape[0]}: use F.linear"
    assert x.shape[1] <= MAX_K, f"gemv takes K up to {MAX_K}, not {x.shape[1]}: use F.linear"
    assert bias is None or (bias.shape == (weight.shape[0],) and bias.dtype == x.dtype), bias


def gemv(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, pdl: bool = False,
         residual: torch.Tensor | None = None) -> torch.Tensor:
    """x [M, K] (M <= 16, K <= MAX_K), weight [N, K], bias [N] or None -> [M, N] in x's dtype; with `residual`
    [M, N], residual + that, written into residual in place (and returned)."""
    _check(x, weight, bias)
    m, k = x.shape
    n = weight.shape[0]
    if residual is not None:
        assert residual.is_contiguous() and residual.shape == (m, n), residual.shape
        assert residual.dtype == x.dtype, (residual.dtype, x.dtype)
        out = residual
    else:
        out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if m == 0 or n == 0:
        return out
    t = tiles(n, k)
    on, extra = pdl_launch(_gemv_kernel, pdl)
    _gemv_kernel[(triton.cdiv(n, t.block_n),)](
        x, weight, bias if bias is not None else x, out, out, m, n, k,
        HAS_BIAS=bias is not None, ADD=residual is not None, PDL=on, BLOCK_M=triton.next_power_of_2(m),
        BLOCK_N=t.block_n, BLOCK_K=t.block_k, num_warps=t.warps, **extra)
    return out


def gemv_add_(residual: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, pdl: bool = False) -> torch.Tensor:
    """residual [M, N] += x [M, K] @ weight^T in place, rounded once (cuBLAS's addmm_ with beta = 1); returns it."""
    return gemv(x, weight, None, pdl, residual=residual)


def gemv_ref(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, pdl: bool = False,
             residual: torch.Tensor | None = None) -> torch.Tensor:
    """The same as F.linear (what cuBLAS runs), or with `residual` its addmm_ (beta = 1); `pdl` is ignored."""
    _check(x, weight, bias)
    if residual is not None:
        return residual.addmm_(x, weight.t()) if bias is None else residual.add_(F.linear(x, weight, bias))
    return F.linear(x, weight, bias)


def gemv_add_ref(residual: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, pdl: bool = False) -> torch.Tensor:
    """residual += x @ weight^T through cuBLAS's addmm_ (beta = 1, one rounding)."""
    return gemv_ref(x, weight, None, pdl, residual=residual)

"""A candidate for the 2-16-row projections (issue 27, c = 8): a K loop of tensor-core dots whose weight tiles stream
through shared memory (Triton's software pipeline, `stages` deep), where kernels/gemv.py's rows kernel holds each
program's whole rows in registers. Optionally each program first sends its columns' rows toward L2
(`prefetch.global.L2`) before it waits for the kernel ahead (PDL), so that a launch's weights stream while the one
before it computes. rows_chain.py times it in its `dot ...` arms; `dot_loop_ref` is its plain check.

Why it might read faster: a whole-rows program holds 64-128 KB of registers from its loads to its last MMA, so an SM
keeps one or two programs and the next launch's programs find no room to start loading; a K-looped program keeps
(stages - 1) tiles in flight in shared memory at a time and leaves room beside it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from voxgate.kernels.utils import interpreted, pdl_launch, prefetch_l2, wait_for_inputs


@triton.jit
def _dot_loop_kernel(x_ptr, w_ptr, res_ptr, out_ptr, M, N, K,
                     ADD: tl.constexpr, SWIGLU: tl.constexpr, PDL: tl.constexpr, PREFETCH: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, LINE: tl.constexpr,
                     LINES: tl.constexpr, UPCAST: tl.constexpr, W_FIRST: tl.constexpr):
    # out [M, N] = x [M, K] @ w[:N]^T (+ res, ADD), or SWIGLU: silu(x @ gate^T) * (x @ up^T), w = gate|up [2N, K].
    # N divides by BLOCK_N and K by BLOCK_K (the launcher checks); rows past M load zeros and store nothing.
    # W_FIRST: out^T = w @ x^T (w the MMA's A operand, [BLOCK_N, BLOCK_K] tiles), else out = x @ w^T.
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    if PREFETCH:  # this program's rows of w toward L2, one address a 128-byte line, before the wait
        lines = tl.minimum(tl.arange(0, LINES) * LINE, K - LINE)
        prefetch_l2(w_ptr + cols[:, None].to(tl.int64) * K + lines[None, :])
        if SWIGLU:
            prefetch_l2(w_ptr + (cols + N)[:, None].to(tl.int64) * K + lines[None, :])
    wait_for_inputs(PDL)
    rows = tl.arange(0, BLOCK_M)
    row_ok = rows < M
    if W_FIRST:
        acc = (cols[:, None] * 0 + rows[None, :] * 0).to(tl.float32)
    else:
        acc = (rows[:, None] * 0 + cols[None, :] * 0).to(tl.float32)
    acc_up = acc
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        if W_FIRST:
            x = tl.load(x_ptr + rows[None, :] * K + ks[:, None], mask=row_ok[None, :], other=0.0)
            w = tl.load(w_ptr + cols[:, None].to(tl.int64) * K + ks[None, :])
        else:
            x = tl.load(x_ptr + rows[:, None] * K + ks[None, :], mask=row_ok[:, None], other=0.0)
            w = tl.load(w_ptr + cols[None, :].to(tl.int64) * K + ks[:, None])
        if UPCAST:
            x = x.to(tl.float32)
            w = w.to(tl.float32)
        acc = tl.dot(w, x, acc, input_precision="ieee") if W_FIRST else tl.dot(x, w, acc, input_precision="ieee")
        if SWIGLU:
            if W_FIRST:
                wu = tl.load(w_ptr + (cols + N)[:, None].to(tl.int64) * K + ks[None, :])
            else:
                wu = tl.load(w_ptr + (cols + N)[None, :].to(tl.int64) * K + ks[:, None])
            if UPCAST:
                wu = wu.to(tl.float32)
            if W_FIRST:
                acc_up = tl.dot(wu, x, acc_up, input_precision="ieee")
            else:
                acc_up = tl.dot(x, wu, acc_up, input_precision="ieee")
    if W_FIRST:
        offs = rows[None, :] * N + cols[:, None]
        ok = row_ok[None, :] & (cols[:, None] < N)
    else:
        offs = rows[:, None] * N + cols[None, :]
        ok = row_ok[:, None] & (cols[None, :] < N)
    if SWIGLU:  # the gate rounded to the output's type first, as F.silu of a bf16 gate would see it
        gate = acc.to(out_ptr.dtype.element_ty).to(tl.float32)
        up = acc_up.to(out_ptr.dtype.element_ty).to(tl.float32)
        acc = gate / (1.0 + tl.exp(-gate)) * up
    if ADD:
        acc += tl.load(res_ptr + offs, mask=ok, other=0.0).to(tl.float32)
    tl.store(out_ptr + offs, acc.to(out_ptr.dtype.element_ty), mask=ok)


def dot_loop(x: torch.Tensor, w: torch.Tensor, res: torch.Tensor | None = None, swiglu: bool = False,
             pdl: bool | str = False, prefetch: bool = False, block_n: int = 16, block_k: int = 256,
             stages: int = 4, warps: int = 4, w_first: bool = False) -> torch.Tensor:
    """x [M <= 16, K] times w [N, K] (swiglu: gate|up [2N, K], SwiGLU of the pair); with `res` [M, N] the product is
    added into it in place (and returned). pdl: as kernels/utils.pdl_launch; prefetch: the program's weight rows
    toward L2 before the wait (compiled only); w_first: w is the MMA's A operand (out^T = w @ x^T)."""
    m, k = x.shape
    n = w.shape[0] // (2 if swiglu else 1)
    assert m <= 16 and w.shape[1] == k and n % block_n == 0 and k % block_k == 0, (x.shape, w.shape)
    out = res if res is not None else torch.empty(m, n, device=x.device, dtype=x.dtype)
    upcast = interpreted(_dot_loop_kernel)
    flag, extra = pdl_launch(_dot_loop_kernel, pdl)
    line = min(128 // x.element_size(), k)
    _dot_loop_kernel[(n // block_n,)](
        x, w, out if res is None else res, out, m, n, k, ADD=res is not None, SWIGLU=swiglu, PDL=flag,
        PREFETCH=prefetch and not upcast, BLOCK_M=16, BLOCK_N=block_n, BLOCK_K=block_k, LINE=line,
        LINES=triton.next_power_of_2(-(-k // line)), UPCAST=upcast, W_FIRST=w_first, num_warps=warps,
        num_stages=stages, **extra)
    return out


def dot_loop_ref(x: torch.Tensor, w: torch.Tensor, res: torch.Tensor | None = None,
                 swiglu: bool = False) -> torch.Tensor:
    """The plain check: fp32 products rounded once to x's type (SwiGLU of the rounded pair; + res)."""
    y = F.linear(x.float(), w.float())
    if swiglu:
        gate, up = y.to(x.dtype).float().chunk(2, dim=-1)
        y = F.silu(gate) * up
    if res is not None:
        y = y + res.float()
    return y.to(x.dtype)

"""The residual add and the next RMSNorm of a decoder layer in one pass: x + delta is stored (it is the residual
stream) and normalized (it feeds the next projection). Without delta, a plain RMSNorm.

Roundings are layers.RMSNorm's and PyTorch's: the sum is rounded to the storage dtype (a bf16 add is an fp32 add
rounded), the norm reads that rounded sum, reduces in fp32, rounds the normalized value, then multiplies by the
weight and rounds again. In a decode step this replaces ~8 small kernels (add, cast, pow, mean, add, rsqrt, mul,
cast, mul) with one; nothing syncs with the host, so it can be captured in a CUDA graph.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .utils import add, pdl_launch, row_warps, wait_for_inputs


@triton.jit
def _add_rms_norm_kernel(x_ptr, d_ptr, w_ptr, sum_ptr, out_ptr, channels, eps, HAS_DELTA: tl.constexpr,
                         BLOCK_C: tl.constexpr, PDL: tl.constexpr):
    # x, delta, sum, out: [M, channels] contiguous; w: [channels]. grid: M, one row per program.
    wait_for_inputs(PDL)
    row = tl.program_id(0).to(tl.int64)
    c = tl.arange(0, BLOCK_C)
    cm = c < channels
    dtype = out_ptr.dtype.element_ty
    x = tl.load(x_ptr + row * channels + c, mask=cm, other=0.0).to(tl.float32)
    if HAS_DELTA:
        x = (x + tl.load(d_ptr + row * channels + c, mask=cm, other=0.0).to(tl.float32)).to(dtype)
        tl.store(sum_ptr + row * channels + c, x, mask=cm)
        x = x.to(tl.float32)
    r = tl.rsqrt(tl.reduce(x * x, 0, add) / channels + eps)
    xn = (x * r).to(dtype).to(tl.float32)
    w = tl.load(w_ptr + c, mask=cm, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * channels + c, (w * xn).to(dtype), mask=cm)


def add_rms_norm(x: torch.Tensor, delta: torch.Tensor | None, weight: torch.Tensor, eps: float, pdl: bool | str = False,
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """x, delta [M, C] contiguous (delta None: no add), weight [C], all one dtype -> (x + delta, RMSNorm of it).
    `pdl`: launched with programmatic dependent launch (kernels/utils.py)."""
    assert x.dim() == 2 and x.is_contiguous(), (x.shape, x.stride())
    rows, channels = x.shape
    assert weight.shape == (channels,) and weight.dtype == x.dtype, (weight.shape, weight.dtype, x.dtype)
    total = x
    if delta is not None:
        assert delta.shape == x.shape and delta.dtype == x.dtype and delta.is_contiguous(), (delta.shape, x.shape)
        total = torch.empty_like(x)
    out = torch.empty_like(x)
    if rows == 0:
        return total, out
    block = triton.next_power_of_2(channels)
    on, extra = pdl_launch(_add_rms_norm_kernel, pdl)
    _add_rms_norm_kernel[(rows,)](x, delta if delta is not None else x, weight, total, out, channels, eps,
                                  HAS_DELTA=delta is not None, BLOCK_C=block, PDL=on, num_warps=row_warps(block),
                                  **extra)
    return total, out


def add_rms_norm_ref(x: torch.Tensor, delta: torch.Tensor | None, weight: torch.Tensor, eps: float,
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """The same in plain PyTorch, layers.RMSNorm's arithmetic."""
    total = x if delta is None else x + delta
    xf = total.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return total, weight * (xf if total.dtype == torch.float32 else xf.to(total.dtype))


def rms_scaled(y: torch.Tensor, x: torch.Tensor, eps: float) -> torch.Tensor:
    """y [N, C'] times 1 / RMS of each row of x [N, C] (fp32, rounded once to y's dtype): a projection of x's rows
    whose RMSNorm weight was folded into the projection's weight (fused_stack.py, `fold_norms`), normalized after
    the matmul instead of before it. The reference for the kernels that take a `residual` (qk_norm_rope.py,
    swiglu.py)."""
    assert y.dim() == x.dim() == 2 and y.shape[0] == x.shape[0], (y.shape, x.shape)
    return (y.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)).to(y.dtype)

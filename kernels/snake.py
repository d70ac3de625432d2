"""SnakeBeta in one pass: y = x + inv_beta[c] * sin(x * alpha[c])^2, computed in fp32, stored in x's dtype.

Unfused in bf16 it is 7 kernels (cast, mul, sin, pow, mul, add, cast) over the codec's largest activations
(96-192 channels at 8-24 kHz); one read and one write instead is what the kernel buys. Input and output may be
strided views (last dim contiguous): the codec reads a transposed conv's trimmed output in place and writes
straight into the next conv's input buffer, after its carried inputs (no `cat`, no `.contiguous()` copy).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _snake_kernel(x_ptr, y_ptr, alpha_ptr, inv_beta_ptr, numel, channels, length, x_sb, x_sc, y_sb, y_sc,
                  BLOCK: tl.constexpr):
    # x, y: [rows, channels, length], last dim contiguous, row/channel strides x_sb, x_sc / y_sb, y_sc; numel
    # elements; alpha, inv_beta: [channels] fp32 (exp(alpha), 1/(exp(beta)+1e-9)). grid: cdiv(numel, BLOCK).
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    in_range = offs < numel
    pos = offs % length
    bc = offs // length
    c = bc % channels
    b = bc // channels
    a = tl.load(alpha_ptr + c, mask=in_range, other=0.0)
    ib = tl.load(inv_beta_ptr + c, mask=in_range, other=0.0)
    x = tl.load(x_ptr + b * x_sb + c * x_sc + pos, mask=in_range, other=0.0).to(tl.float32)
    s = tl.sin(x * a)
    tl.store(y_ptr + b * y_sb + c * y_sc + pos, (x + ib * (s * s)).to(y_ptr.dtype.element_ty), mask=in_range)


def snake(x: torch.Tensor, alpha: torch.Tensor, inv_beta: torch.Tensor, out: torch.Tensor | None = None,
          ) -> torch.Tensor:
    """x [B, C, L] (any float dtype); alpha, inv_beta [C] fp32 -> [B, C, L] in x's dtype (into `out` if given:
    same shape and dtype, any row and channel strides, last dim contiguous)."""
    assert x.dim() == 3 and alpha.shape == inv_beta.shape == (x.shape[1],), (x.shape, alpha.shape)
    assert alpha.dtype == inv_beta.dtype == torch.float32
    if x.stride(2) != 1 and x.shape[2] > 1:
        x = x.contiguous()
    y = torch.empty_like(x, memory_format=torch.contiguous_format) if out is None else out
    assert y.shape == x.shape and y.dtype == x.dtype, (x.shape, y.shape, y.dtype)
    assert y.stride(2) == 1 or y.shape[2] <= 1, y.stride()
    if x.numel() == 0:
        return y
    block = 1024
    _snake_kernel[(triton.cdiv(x.numel(), block),)](x, y, alpha.contiguous(), inv_beta.contiguous(), x.numel(),
                                                     x.shape[1], x.shape[2], x.stride(0), x.stride(1), y.stride(0),
                                                     y.stride(1), BLOCK=block, num_warps=4)
    return y


def snake_ref(x: torch.Tensor, alpha: torch.Tensor, inv_beta: torch.Tensor) -> torch.Tensor:
    """The same in plain PyTorch (codec.SnakeBeta's formula with the parameters already exponentiated)."""
    xf = x.float()
    y = xf + inv_beta[None, :, None] * torch.sin(xf * alpha[None, :, None]).pow(2)
    return y.to(x.dtype)

"""SnakeBeta in one pass: y = x + inv_beta[c] * sin(x * alpha[c])^2, computed in fp32, stored in x's dtype; and
the residual unit's end in one pass (`bias_residual`: x + (y + bias[c])).

Unfused in bf16 it is 7 kernels (cast, mul, sin, pow, mul, add, cast) over the codec's largest activations
(96-192 channels at 8-24 kHz); one read and one write instead is what the kernel buys. Input and output may be
strided views (last dim contiguous): the codec reads a transposed conv's trimmed output in place and writes
straight into the next conv's input buffer, after its carried inputs (no `cat`, no `.contiguous()` copy).

PyTorch adds a cuDNN conv's bias in a separate in-place pass over the output; the codec runs its residual units'
convs without bias and adds it here instead (`snake(..., bias=)` for the first conv, `bias_residual` for the
second). Each sum with a bias is rounded to the storage dtype where the PyTorch ops round it: the same bits.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _block_coords(numel, channels, length, BLOCK: tl.constexpr):
    """This program's flat element indices into [rows, channels, length], their mask, and (row, channel, pos)."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    pos = offs % length
    bc = offs // length
    return offs, offs < numel, bc // channels, bc % channels, pos


@triton.jit
def _snake_kernel(x_ptr, y_ptr, alpha_ptr, inv_beta_ptr, bias_ptr, numel, channels, length, x_sb, x_sc, y_sb, y_sc,
                  HAS_BIAS: tl.constexpr, BLOCK: tl.constexpr):
    # x, y: [rows, channels, length], last dim contiguous, row/channel strides x_sb, x_sc / y_sb, y_sc; numel
    # elements; alpha, inv_beta: [channels] fp32 (exp(alpha), 1/(exp(beta)+1e-9)); bias: [channels], x's dtype,
    # added to x first and rounded to x's dtype (as a conv's separate bias add would). grid: cdiv(numel, BLOCK).
    _, in_range, b, c, pos = _block_coords(numel, channels, length, BLOCK)
    a = tl.load(alpha_ptr + c, mask=in_range, other=0.0)
    ib = tl.load(inv_beta_ptr + c, mask=in_range, other=0.0)
    x = tl.load(x_ptr + b * x_sb + c * x_sc + pos, mask=in_range, other=0.0).to(tl.float32)
    if HAS_BIAS:
        bias = tl.load(bias_ptr + c, mask=in_range, other=0.0).to(tl.float32)
        x = (x + bias).to(x_ptr.dtype.element_ty).to(tl.float32)
    s = tl.sin(x * a)
    tl.store(y_ptr + b * y_sb + c * y_sc + pos, (x + ib * (s * s)).to(y_ptr.dtype.element_ty), mask=in_range)


def snake(x: torch.Tensor, alpha: torch.Tensor, inv_beta: torch.Tensor, out: torch.Tensor | None = None,
          bias: torch.Tensor | None = None) -> torch.Tensor:
    """x [B, C, L] (any float dtype); alpha, inv_beta [C] fp32 -> [B, C, L] in x's dtype (into `out` if given:
    same shape and dtype, any row and channel strides, last dim contiguous). bias [C] in x's dtype: snake of
    (x + bias) rounded to x's dtype, i.e. a conv's bias folded in (the conv runs without it)."""
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
    if bias is not None:
        assert bias.shape == alpha.shape and bias.dtype == x.dtype, (bias.shape, bias.dtype, x.dtype)
    _snake_kernel[(triton.cdiv(x.numel(), block),)](
        x, y, alpha.contiguous(), inv_beta.contiguous(), alpha if bias is None else bias.contiguous(), x.numel(),
        x.shape[1], x.shape[2], x.stride(0), x.stride(1), y.stride(0), y.stride(1), HAS_BIAS=bias is not None,
        BLOCK=block, num_warps=4)
    return y


def snake_ref(x: torch.Tensor, alpha: torch.Tensor, inv_beta: torch.Tensor, bias: torch.Tensor | None = None,
              ) -> torch.Tensor:
    """The same in plain PyTorch (codec.SnakeBeta's formula with the parameters already exponentiated)."""
    if bias is not None:
        x = x + bias[None, :, None]
    xf = x.float()
    y = xf + inv_beta[None, :, None] * torch.sin(xf * alpha[None, :, None]).pow(2)
    return y.to(x.dtype)


@triton.jit
def _bias_residual_kernel(x_ptr, y_ptr, bias_ptr, out_ptr, numel, channels, length, x_sb, x_sc, y_sb, y_sc,
                          BLOCK: tl.constexpr):
    # x, y: [rows, channels, length], last dim contiguous, row/channel strides x_sb, x_sc / y_sb, y_sc;
    # out: contiguous; bias: [channels]. grid: cdiv(numel, BLOCK).
    offs, in_range, b, c, pos = _block_coords(numel, channels, length, BLOCK)
    dtype = out_ptr.dtype.element_ty
    bias = tl.load(bias_ptr + c, mask=in_range, other=0.0).to(tl.float32)
    y = tl.load(y_ptr + b * y_sb + c * y_sc + pos, mask=in_range, other=0.0).to(tl.float32)
    t = (y + bias).to(dtype).to(tl.float32)
    x = tl.load(x_ptr + b * x_sb + c * x_sc + pos, mask=in_range, other=0.0).to(tl.float32)
    tl.store(out_ptr + offs, (x + t).to(dtype), mask=in_range)


def _last_contiguous(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(2) == 1 or t.shape[2] <= 1 else t.contiguous()


def bias_residual(x: torch.Tensor, y: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """x, y [B, C, L] (same dtype; any row/channel strides), bias [C] -> x + (y + bias[c]), contiguous."""
    assert x.dim() == 3 and x.shape == y.shape and x.dtype == y.dtype, (x.shape, y.shape, x.dtype, y.dtype)
    assert bias.shape == (x.shape[1],), (bias.shape, x.shape)
    x, y = _last_contiguous(x), _last_contiguous(y)
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if out.numel() == 0:
        return out
    block = 1024
    _bias_residual_kernel[(triton.cdiv(out.numel(), block),)](
        x, y, bias.contiguous(), out, out.numel(), x.shape[1], x.shape[2], x.stride(0), x.stride(1), y.stride(0),
        y.stride(1), BLOCK=block, num_warps=4)
    return out


def bias_residual_ref(x: torch.Tensor, y: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """The same in PyTorch ops (what the codec ran before: the conv's bias add, then the residual add)."""
    return x + (y + bias[None, :, None])

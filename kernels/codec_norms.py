"""Two row-wise fused kernels for the streamed codec decoder, time-major ([B, L, C], C contiguous).

`dwconv_layernorm`: a ConvNeXt block's depthwise causal conv (kernel K, reading each stream's last K-1 inputs
from its slot in the history pool, no `cat`) followed by its LayerNorm over channels. In PyTorch that is a cat, a
transpose, a conv, a bias add and a layer norm; here one program reads the K input rows it needs and writes one
normalized row.

`rms_norm`: layers.RMSNorm in one pass.

Each value is rounded to the storage dtype where the PyTorch modules round it: the conv output (sum with bias in
fp32) once before the norm, RMSNorm's normalized value once before the weight product. Neither function reads a
device value on the host, so both can be captured in a CUDA graph.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .utils import add, row_warps


@triton.jit
def _sum(x):
    # tl.sum spelled with tl.reduce (and tl.zeros with tl.full below): in triton 3.9 those are @jit helpers whose
    # mode is fixed when triton is first imported, so the interpreter-mode re-import of this module in
    # tests/triton_mode.py cannot switch them; builtins such as tl.reduce are patched per launch.
    return tl.reduce(x, 0, add)


@triton.jit
def _dwconv_ln_kernel(x_ptr, state_ptr, slots_ptr, w_ptr, bias_ptr, lnw_ptr, lnb_ptr, out_ptr, length, channels,
                      st_s0, st_s1, eps, K: tl.constexpr, BLOCK_C: tl.constexpr):
    # x, out: [B, length, channels] contiguous; state: [slots, K-1, channels] with strides st_s0, st_s1, 1;
    # w: [channels, K] contiguous. grid: B * length, one (b, t) row per program.
    row = tl.program_id(0).to(tl.int64)
    b = row // length
    t = row % length
    c = tl.arange(0, BLOCK_C)
    cm = c < channels
    slot = tl.load(slots_ptr + b)
    acc = tl.full([BLOCK_C], 0.0, tl.float32)
    for j in tl.static_range(K):
        s = t + (j - (K - 1))  # input time of tap j; negative: carried history
        # The row comes from x or from the history: the other load is masked off entirely (a channel limit of
        # 0, rather than `cm & (s >= 0)`, which Triton 3.9's interpreter turns into an int mask it rejects), and
        # its index is clamped so that even the unused address stays inside its tensor.
        v = tl.load(x_ptr + (b * length + tl.maximum(s, 0)) * channels + c, mask=c < tl.where(s >= 0, channels, 0),
                    other=0.0)
        if j < K - 1:  # only the first K-1 taps can reach back into the history
            h = tl.load(state_ptr + slot * st_s0 + tl.minimum(t + j, K - 2) * st_s1 + c,
                        mask=c < tl.where(s < 0, channels, 0), other=0.0)
            v = tl.where(s >= 0, v, h)
        w = tl.load(w_ptr + c * K + j, mask=cm, other=0.0)
        acc += w.to(tl.float32) * v.to(tl.float32)
    acc += tl.load(bias_ptr + c, mask=cm, other=0.0).to(tl.float32)
    # PyTorch's conv output is stored in x's dtype before the norm reads it. Masked lanes are exactly 0.
    y = acc.to(out_ptr.dtype.element_ty).to(tl.float32)
    mean = _sum(y) / channels
    d = tl.where(cm, y - mean, 0.0)
    rstd = tl.rsqrt(_sum(d * d) / channels + eps)
    lnw = tl.load(lnw_ptr + c, mask=cm, other=0.0).to(tl.float32)
    lnb = tl.load(lnb_ptr + c, mask=cm, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * channels + c, (d * rstd * lnw + lnb).to(out_ptr.dtype.element_ty), mask=cm)


def dwconv_layernorm(x: torch.Tensor, state: torch.Tensor, slots: torch.Tensor, weight: torch.Tensor,
                     bias: torch.Tensor, ln_weight: torch.Tensor, ln_bias: torch.Tensor, eps: float) -> torch.Tensor:
    """x [B, L, C] contiguous (bf16/fp32); state [num_slots, K-1, C] (any dim-0/1 strides, last dim contiguous);
    slots [B] int64; weight [C, K], bias, ln_weight, ln_bias [C], all in x's dtype -> [B, L, C] contiguous:
    LayerNorm(depthwise causal conv of state[slots[b]] ++ x[b]). `state` is only read."""
    assert x.dim() == 3 and x.is_contiguous(), (x.shape, x.stride())
    bsz, length, channels = x.shape
    k = weight.shape[-1]
    assert weight.shape == (channels, k) and k >= 1, (weight.shape, x.shape)
    assert bias.shape == ln_weight.shape == ln_bias.shape == (channels,), (bias.shape, ln_weight.shape, ln_bias.shape)
    assert weight.dtype == bias.dtype == ln_weight.dtype == ln_bias.dtype == x.dtype
    assert state.dim() == 3 and state.shape[1:] == (k - 1, channels) and state.dtype == x.dtype, state.shape
    assert state.stride(2) == 1 or channels == 1, state.stride()
    assert slots.shape == (bsz,) and slots.dtype == torch.int64, (slots.shape, slots.dtype)
    out = torch.empty_like(x)
    if out.numel() == 0:
        return out
    block_c = triton.next_power_of_2(channels)
    _dwconv_ln_kernel[(bsz * length,)](
        x, state, slots, weight.contiguous(), bias.contiguous(), ln_weight.contiguous(), ln_bias.contiguous(), out,
        length, channels, state.stride(0), state.stride(1), eps, K=k, BLOCK_C=block_c,
        num_warps=row_warps(block_c))
    return out


def dwconv_layernorm_ref(x: torch.Tensor, state: torch.Tensor, slots: torch.Tensor, weight: torch.Tensor,
                         bias: torch.Tensor, ln_weight: torch.Tensor, ln_bias: torch.Tensor, eps: float,
                         ) -> torch.Tensor:
    """The same in plain PyTorch, time-major throughout."""
    k = weight.shape[-1]
    xin = torch.cat([state[slots], x], dim=1).float()  # [B, K-1+L, C]
    taps = xin.unfold(1, k, 1)  # [B, L, C, K]: taps[b, t, c, j] = xin[b, t + j, c]
    y = ((taps * weight.float()).sum(-1) + bias.float()).to(x.dtype).float()
    mean = y.mean(-1, keepdim=True)
    var = (y - mean).pow(2).mean(-1, keepdim=True)  # biased, as nn.LayerNorm
    return ((y - mean) * torch.rsqrt(var + eps) * ln_weight.float() + ln_bias.float()).to(x.dtype)


@triton.jit
def _rms_norm_kernel(x_ptr, w_ptr, out_ptr, channels, x_sm, eps, BLOCK_C: tl.constexpr):
    # x: [M, channels], row stride x_sm, last dim contiguous; out: contiguous. grid: M, one row per program.
    row = tl.program_id(0).to(tl.int64)
    c = tl.arange(0, BLOCK_C)
    cm = c < channels
    dtype = out_ptr.dtype.element_ty
    xf = tl.load(x_ptr + row * x_sm + c, mask=cm, other=0.0).to(tl.float32)
    r = tl.rsqrt(_sum(xf * xf) / channels + eps)
    # RMSNorm rounds the normalized value to x's dtype, then multiplies in x's dtype: the fp32 product of two
    # bf16 values is exact, so one more rounding of it gives the same bits.
    xn = (xf * r).to(dtype).to(tl.float32)
    w = tl.load(w_ptr + c, mask=cm, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * channels + c, (w * xn).to(dtype), mask=cm)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x [M, C] (any row stride, last dim contiguous), weight [C] in x's dtype -> [M, C] contiguous, as
    layers.RMSNorm."""
    assert x.dim() == 2 and (x.stride(1) == 1 or x.shape[1] == 1), (x.shape, x.stride())
    rows, channels = x.shape
    assert weight.shape == (channels,) and weight.dtype == x.dtype, (weight.shape, weight.dtype, x.dtype)
    out = torch.empty((rows, channels), dtype=x.dtype, device=x.device)
    if out.numel() == 0:
        return out
    block_c = triton.next_power_of_2(channels)
    _rms_norm_kernel[(rows,)](x, weight.contiguous(), out, channels, x.stride(0), eps, BLOCK_C=block_c,
                              num_warps=row_warps(block_c))
    return out


def rms_norm_ref(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """The same in plain PyTorch (layers.RMSNorm's rounding order)."""
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)

"""Qwen3 attention's inputs in one launch: per token, RMSNorm of every query and key head over head_dim (q/k-norm),
rotate-half RoPE at the token's position, and the key and value written into a KV store at (slot, position).

qkv is one fused projection's output, [N, (Hq + 2 Hkv) * D]: q heads, then k heads, then v heads. The store is any
[slots, Hkv, positions, D] view (the Talker's slot pool, or a step's small depth-loop cache). Roundings follow
layers.py: the normalized value rounded, times the weight rounded, then x*cos and rotate(x)*sin each rounded and
their sum rounded (in bf16 the three RoPE products round separately, as PyTorch's eager ops do). In place of ~30
small kernels per layer (two norms, two RoPEs, two cache writes); capturable in a CUDA graph.

Two launch shapes, the same arithmetic: a program per (token, head) for the step's few rows (up to 128, a few
thousand programs), and a program per token with all its heads for a prefill's thousands of tokens (the aligner's
packed decoder, a prompt), where a program per head made ~100,000 programs of a few dependent loads each, latency-
bound wave after wave (2.3 ms of a 54-clip aligner call on an H100).

With `residual` (a stack whose input RMSNorm weight is folded into q|k|v's weight: fused_stack.py, `fold_norms`),
qkv is the projection of the unnormalized residual rows: each program first takes 1 / RMS of its token's residual
row and scales the token's q, k and v by it (each product rounded), then goes on as above. That is the RMSNorm the
projection's input no longer had, and one launch a layer fewer.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .add_rms_norm import rms_scaled
from .utils import SUM, add, pdl_launch, row_rstd, wait_for_inputs

# From this many tokens on, a program per token (all its heads) instead of a program per (token, head).
TOKEN_PROGRAMS_FROM = 256


@triton.jit
def _qk_norm_rope_kernel(qkv_ptr, qw_ptr, kw_ptr, cos_ptr, sin_ptr, pos_ptr, slots_ptr, q_ptr, k_ptr, v_ptr, res_ptr,
                         k_s0, k_s1, k_s2, v_s0, v_s1, v_s2, H, eps,
                         HQ: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr, HAS_RES: tl.constexpr,
                         BLOCK_H: tl.constexpr, PDL: tl.constexpr):
    # qkv [N, (HQ + 2 HKV) * D] contiguous; q out [N, HQ, D] contiguous; cos/sin [P, D] contiguous; k/v store
    # [slots, HKV, P, D] with strides (s0, s1, s2, 1); HAS_RES: res [N, H] contiguous, whose rows' 1 / RMS scales
    # qkv first. grid: (N, HQ + HKV): one head of one token per program.
    wait_for_inputs(PDL)
    t = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1)
    dtype = q_ptr.dtype.element_ty
    d = tl.arange(0, D)
    partner = tl.where(d < D // 2, d + D // 2, d - D // 2)  # rotate_half reads the other half
    sign = tl.where(d < D // 2, -1.0, 1.0)
    pos = tl.load(pos_ptr + t)
    row = qkv_ptr + t * ((HQ + 2 * HKV) * D) + h * D
    x = tl.load(row + d).to(tl.float32)
    xp = tl.load(row + partner).to(tl.float32)
    scale = 1.0
    if HAS_RES:
        scale = row_rstd(res_ptr + t * H, H, eps, BLOCK_H)
        x = (x * scale).to(dtype).to(tl.float32)
        xp = (xp * scale).to(dtype).to(tl.float32)
    is_q = h < HQ
    w_ptr = tl.where(is_q, qw_ptr, kw_ptr)
    r = tl.rsqrt(tl.reduce(x * x, 0, add) / D + eps)
    xn = ((x * r).to(dtype).to(tl.float32) * tl.load(w_ptr + d).to(tl.float32)).to(dtype).to(tl.float32)
    xpn = ((xp * r).to(dtype).to(tl.float32) * tl.load(w_ptr + partner).to(tl.float32)).to(dtype).to(tl.float32)
    cos = tl.load(cos_ptr + pos * D + d).to(tl.float32)
    sin = tl.load(sin_ptr + pos * D + d).to(tl.float32)
    y = ((xn * cos).to(dtype).to(tl.float32) + (sign * xpn * sin).to(dtype).to(tl.float32)).to(dtype)
    if is_q:
        tl.store(q_ptr + (t * HQ + h) * D + d, y)
    else:
        j = (h - HQ).to(tl.int64)
        slot = tl.load(slots_ptr + t).to(tl.int64)
        tl.store(k_ptr + slot * k_s0 + j * k_s1 + pos * k_s2 + d, y)
        v = tl.load(qkv_ptr + t * ((HQ + 2 * HKV) * D) + (HQ + HKV + j) * D + d)
        if HAS_RES:
            v = (v.to(tl.float32) * scale).to(dtype)
        tl.store(v_ptr + slot * v_s0 + j * v_s1 + pos * v_s2 + d, v)


@triton.jit
def _qk_norm_rope_token_kernel(qkv_ptr, qw_ptr, kw_ptr, cos_ptr, sin_ptr, pos_ptr, slots_ptr, q_ptr, k_ptr, v_ptr,
                               res_ptr, k_s0, k_s1, k_s2, v_s0, v_s1, v_s2, H, eps,
                               HQ: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr, HP: tl.constexpr,
                               VP: tl.constexpr, HAS_RES: tl.constexpr, BLOCK_H: tl.constexpr, PDL: tl.constexpr):
    # The same as _qk_norm_rope_kernel for every q and k head of one token at once ([HP, D], HP >= HQ + HKV a power
    # of two, rows past them masked), then its HKV value heads (VP >= HKV). grid: (N,).
    wait_for_inputs(PDL)
    t = tl.program_id(0).to(tl.int64)
    dtype = q_ptr.dtype.element_ty
    h = tl.arange(0, HP)[:, None]
    d = tl.arange(0, D)[None, :]
    live = h < HQ + HKV
    is_q = h < HQ
    partner = tl.where(d < D // 2, d + D // 2, d - D // 2)
    sign = tl.where(d < D // 2, -1.0, 1.0)
    pos = tl.load(pos_ptr + t)
    row = qkv_ptr + t * ((HQ + 2 * HKV) * D)
    x = tl.load(row + h * D + d, mask=live, other=0.0).to(tl.float32)
    xp = tl.load(row + h * D + partner, mask=live, other=0.0).to(tl.float32)
    scale = 1.0
    if HAS_RES:
        scale = row_rstd(res_ptr + t * H, H, eps, BLOCK_H)
        x = (x * scale).to(dtype).to(tl.float32)
        xp = (xp * scale).to(dtype).to(tl.float32)
    w = tl.where(is_q, tl.load(qw_ptr + d).to(tl.float32), tl.load(kw_ptr + d).to(tl.float32))
    wp = tl.where(is_q, tl.load(qw_ptr + partner).to(tl.float32), tl.load(kw_ptr + partner).to(tl.float32))
    r = tl.rsqrt(tl.reduce(x * x, 1, SUM) / D + eps)[:, None]
    xn = ((x * r).to(dtype).to(tl.float32) * w).to(dtype).to(tl.float32)
    xpn = ((xp * r).to(dtype).to(tl.float32) * wp).to(dtype).to(tl.float32)
    cos = tl.load(cos_ptr + pos * D + d).to(tl.float32)
    sin = tl.load(sin_ptr + pos * D + d).to(tl.float32)
    y = ((xn * cos).to(dtype).to(tl.float32) + (sign * xpn * sin).to(dtype).to(tl.float32)).to(dtype)
    tl.store(q_ptr + (t * HQ + h) * D + d, y, mask=is_q)
    slot = tl.load(slots_ptr + t).to(tl.int64)
    j = (h - HQ).to(tl.int64)  # the key head (negative on q rows, which store nothing here)
    tl.store(k_ptr + slot * k_s0 + j * k_s1 + pos * k_s2 + d, y, mask=live & (h >= HQ))
    jv = tl.arange(0, VP)[:, None]
    v = tl.load(row + (HQ + HKV + jv) * D + d, mask=jv < HKV, other=0.0)
    if HAS_RES:
        v = (v.to(tl.float32) * scale).to(dtype)
    tl.store(v_ptr + slot * v_s0 + jv.to(tl.int64) * v_s1 + pos * v_s2 + d, v, mask=jv < HKV)


def _check(qkv: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
           positions: torch.Tensor, k_store: torch.Tensor, v_store: torch.Tensor, slots: torch.Tensor, heads: int,
           kv_heads: int, residual: torch.Tensor | None) -> None:
    n, width = qkv.shape
    d = q_weight.shape[0]
    assert width == (heads + 2 * kv_heads) * d and qkv.is_contiguous(), (qkv.shape, heads, kv_heads, d)
    assert k_weight.shape == (d,) and cos.shape == sin.shape and cos.shape[1] == d, (k_weight.shape, cos.shape)
    assert k_store.shape == v_store.shape and k_store.shape[1] == kv_heads and k_store.shape[3] == d, k_store.shape
    assert k_store.stride(3) == 1 and v_store.stride(3) == 1 and cos.is_contiguous() and sin.is_contiguous()
    assert positions.shape == slots.shape == (n,) and positions.dtype == slots.dtype == torch.int64
    assert qkv.dtype == q_weight.dtype == k_weight.dtype == cos.dtype == k_store.dtype, (qkv.dtype, k_store.dtype)
    assert residual is None or (residual.dim() == 2 and residual.shape[0] == n and residual.is_contiguous()
                                and residual.dtype == qkv.dtype), None if residual is None else residual.shape


def qk_norm_rope(qkv: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor, cos: torch.Tensor,
                 sin: torch.Tensor, positions: torch.Tensor, k_store: torch.Tensor, v_store: torch.Tensor,
                 slots: torch.Tensor, heads: int, kv_heads: int, eps: float,
                 per_token: bool | None = None, residual: torch.Tensor | None = None, pdl: bool | str = False,
                 ) -> torch.Tensor:
    """qkv [N, (heads + 2 kv_heads) * D], q_weight/k_weight [D], cos/sin [P, D] tables, positions/slots [N]
    int64; writes keys and values into k_store/v_store [S, kv_heads, P, D] at (slots[i], :, positions[i]) and
    returns the queries [N, heads, D], normalized and rotated. `per_token`: a program per token (default from
    TOKEN_PROGRAMS_FROM tokens on) or per (token, head). `residual` [N, H]: qkv is first scaled by 1 / RMS of its
    rows (the folded input norm; eps is the same as the heads'). `pdl`: launched with programmatic dependent launch
    (kernels/utils.py)."""
    _check(qkv, q_weight, k_weight, cos, sin, positions, k_store, v_store, slots, heads, kv_heads, residual)
    n, d = qkv.shape[0], q_weight.shape[0]
    assert d & (d - 1) == 0 and d >= 2, d
    q = torch.empty((n, heads, d), dtype=qkv.dtype, device=qkv.device)
    if n == 0:
        return q
    strides = (k_store.stride(0), k_store.stride(1), k_store.stride(2), v_store.stride(0), v_store.stride(1),
               v_store.stride(2))
    width = residual.shape[1] if residual is not None else 1
    res = dict(HAS_RES=residual is not None, BLOCK_H=triton.next_power_of_2(width))
    if per_token if per_token is not None else n >= TOKEN_PROGRAMS_FROM:
        on, extra = pdl_launch(_qk_norm_rope_token_kernel, pdl)
        _qk_norm_rope_token_kernel[(n,)](
            qkv, q_weight, k_weight, cos, sin, positions, slots, q, k_store, v_store,
            residual if residual is not None else qkv, *strides, width, eps, HQ=heads, HKV=kv_heads, D=d,
            HP=triton.next_power_of_2(heads + kv_heads), VP=triton.next_power_of_2(kv_heads), **res, PDL=on,
            num_warps=4, **extra)
        return q
    on, extra = pdl_launch(_qk_norm_rope_kernel, pdl)
    _qk_norm_rope_kernel[(n, heads + kv_heads)](
        qkv, q_weight, k_weight, cos, sin, positions, slots, q, k_store, v_store,
        residual if residual is not None else qkv, *strides, width, eps, HQ=heads, HKV=kv_heads, D=d, **res,
        PDL=on, num_warps=1 if d <= 64 else 2, **extra)
    return q


def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * (xf if x.dtype == torch.float32 else xf.to(x.dtype))


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def qk_norm_rope_ref(qkv: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor, cos: torch.Tensor,
                     sin: torch.Tensor, positions: torch.Tensor, k_store: torch.Tensor, v_store: torch.Tensor,
                     slots: torch.Tensor, heads: int, kv_heads: int, eps: float,
                     residual: torch.Tensor | None = None) -> torch.Tensor:
    """The same in plain PyTorch: layers.Attention's q/k-norm and apply_rope, then the two store writes (with
    `residual`, after add_rms_norm.rms_scaled)."""
    _check(qkv, q_weight, k_weight, cos, sin, positions, k_store, v_store, slots, heads, kv_heads, residual)
    if residual is not None:
        qkv = rms_scaled(qkv, residual, eps)
    n, d = qkv.shape[0], q_weight.shape[0]
    q, k, v = qkv.view(n, heads + 2 * kv_heads, d).split((heads, kv_heads, kv_heads), dim=1)
    c, s = cos[positions][:, None], sin[positions][:, None]
    q = _rope(_rms(q, q_weight, eps), c, s)
    k_store[slots, :, positions] = _rope(_rms(k, k_weight, eps), c, s)
    v_store[slots, :, positions] = v
    return q

"""Attention of single query tokens over their own stream's keys, read in place from a slot pool.

The Talker's KV cache lives in a pool of per-stream slots [slots, kv_heads, positions, head_dim]. A step brings
tokens of many streams (one per decode row, several per prompt being prefilled); token i belongs to slot
slots[i] and sees that slot's positions 0 .. lengths[i]-1 (its own position included: the caller writes the
token's key and value first). Each program handles one token and one KV head, with the GROUP query heads that
share it (GQA), and loops over that token's own length only: no padding to the longest row, no gather of the
cache. All shapes depend only on the number of tokens, so the call can be captured in a CUDA graph.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from .utils import interpreted, pdl_launch, softmax_block, wait_for_inputs


@triton.jit
def _slot_attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, slots_ptr, lengths_ptr, qk_scale,
                           q_s0, q_s1, k_s0, k_s1, k_s2, v_s0, v_s1, v_s2, o_s0, o_s1,
                           GROUP: tl.constexpr, D: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_D: tl.constexpr,
                           BLOCK_N: tl.constexpr, DOT_DTYPE: tl.constexpr, PRECISION: tl.constexpr,
                           PDL: tl.constexpr):
    # q [N, Hq, D] (strides q_s0, q_s1, 1), o likewise; k/v [slots, Hkv, P, D] (strides s0, s1, s2, 1).
    # qk_scale = log2(e) / sqrt(D): softmax through exp2. grid: (N, Hkv).
    wait_for_inputs(PDL)
    tok = tl.program_id(0).to(tl.int64)
    kvh = tl.program_id(1).to(tl.int64)
    dtype = o_ptr.dtype.element_ty
    slot = tl.load(slots_ptr + tok).to(tl.int64)
    length = tl.load(lengths_ptr + tok)

    g = tl.arange(0, BLOCK_G)  # query heads of this KV head, padded to >= 16 rows for tl.dot
    d = tl.arange(0, BLOCK_D)
    g_ok = g < GROUP
    d_ok = d < D
    q_rows = q_ptr + tok * q_s0 + (kvh * GROUP + g)[:, None] * q_s1 + d[None, :]
    q = tl.load(q_rows, mask=g_ok[:, None] & d_ok[None, :], other=0.0).to(DOT_DTYPE)

    m = tl.full((BLOCK_G,), -1.0e30, tl.float32)
    denom = tl.full((BLOCK_G,), 0.0, tl.float32)
    acc = tl.full((BLOCK_G, BLOCK_D), 0.0, tl.float32)
    k_base = k_ptr + slot * k_s0 + kvh * k_s1
    v_base = v_ptr + slot * v_s0 + kvh * v_s1
    num_blocks = (length + BLOCK_N - 1) // BLOCK_N
    for blk in range(0, num_blocks):
        n = blk * BLOCK_N + tl.arange(0, BLOCK_N)
        n_ok = n < length
        kv_mask = n_ok[:, None] & d_ok[None, :]
        k = tl.load(k_base + n[:, None].to(tl.int64) * k_s2 + d[None, :], mask=kv_mask, other=0.0)
        v = tl.load(v_base + n[:, None].to(tl.int64) * v_s2 + d[None, :], mask=kv_mask, other=0.0)
        m, denom, acc = softmax_block(q, k, v, n_ok[None, :], m, denom, acc, qk_scale, dtype, DOT_DTYPE, PRECISION)
    o = acc / denom[:, None]
    o_rows = o_ptr + tok * o_s0 + (kvh * GROUP + g)[:, None] * o_s1 + d[None, :]
    tl.store(o_rows, o.to(dtype), mask=g_ok[:, None] & d_ok[None, :])


# The interpreter's bf16 dots are wrong (utils.interpreted): interpreted, they take the values upcast to fp32.
_DOT_UPCAST = interpreted(_slot_attention_kernel)
BLOCK_N = 64  # keys per loop step


def _check(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, slots: torch.Tensor,
           lengths: torch.Tensor) -> None:
    n, hq, d = q.shape
    assert k_cache.dim() == 4 and v_cache.shape == k_cache.shape, (k_cache.shape, v_cache.shape)
    assert k_cache.shape[3] == d and hq % k_cache.shape[1] == 0, (q.shape, k_cache.shape)
    assert q.stride(2) == 1 and k_cache.stride(3) == 1 and v_cache.stride(3) == 1, "last dims must be contiguous"
    assert q.dtype == k_cache.dtype == v_cache.dtype and q.dtype in (torch.bfloat16, torch.float16, torch.float32)
    assert slots.shape == lengths.shape == (n,), (slots.shape, lengths.shape, n)
    assert slots.dtype == lengths.dtype == torch.int64, (slots.dtype, lengths.dtype)


def slot_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, slots: torch.Tensor,
                   lengths: torch.Tensor, pdl: bool | str = False) -> torch.Tensor:
    """q [N, Hq, D] (rotated), k_cache/v_cache [slots, Hkv, P, D] views, slots/lengths [N] int64 (1 <= lengths[i]
    <= P) -> o [N, Hq, D]: softmax(q k^T / sqrt(D)) v over keys 0 .. lengths[i]-1 of slot slots[i]. `pdl`:
    launched with programmatic dependent launch (kernels/utils.py)."""
    _check(q, k_cache, v_cache, slots, lengths)
    n, hq, d = q.shape
    hkv = k_cache.shape[1]
    o = torch.empty((n, hq, d), dtype=q.dtype, device=q.device)
    if n == 0:
        return o
    group = hq // hkv
    f32_dots = q.dtype == torch.float32 or _DOT_UPCAST
    on, extra = pdl_launch(_slot_attention_kernel, pdl)
    _slot_attention_kernel[(n, hkv)](
        q, k_cache, v_cache, o, slots, lengths, math.log2(math.e) / math.sqrt(d),
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), o.stride(0), o.stride(1),
        GROUP=group, D=d, BLOCK_G=max(16, triton.next_power_of_2(group)), BLOCK_D=max(16, triton.next_power_of_2(d)),
        BLOCK_N=BLOCK_N, DOT_DTYPE=tl.float32 if f32_dots else tl.bfloat16,
        PRECISION="ieee" if f32_dots else None, PDL=on, num_warps=4, **extra)  # fp32 dots must not round to TF32
    return o


def slot_attention_ref(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, slots: torch.Tensor,
                       lengths: torch.Tensor) -> torch.Tensor:
    """The same in plain PyTorch: gathers each token's whole slot (a copy of [N, Hkv, P, D]) and masks positions
    past its length. Fine at test sizes and for the CPU engine; on a GPU at real sizes, use slot_attention."""
    _check(q, k_cache, v_cache, slots, lengths)
    positions = k_cache.shape[2]
    visible = torch.arange(positions, device=q.device)[None, :] < lengths[:, None]  # [N, P]
    # positions past a token's length may hold anything (unwritten memory): zeroed, so they cannot turn into NaN
    keep = visible[:, None, :, None]
    keys, values = (torch.where(keep, c[slots], 0) for c in (k_cache, v_cache))  # [N, Hkv, P, D]
    o = F.scaled_dot_product_attention(q[:, :, None], keys, values, attn_mask=visible[:, None, None],
                                       enable_gqa=q.shape[1] != keys.shape[1])
    return o[:, :, 0]

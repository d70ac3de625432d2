"""One attention of the code predictor's depth loop in one launch: q/k RMSNorm over head_dim, rotate-half RoPE at
the token's position, the key and value written into the step's small store, and attention over the store's
positions 0..position (at most 16 in the depth loop), exact softmax in one block.

The unfused stack spends two launches here (kernels/qk_norm_rope.py, then kernels/slot_attention.py) because a
token may attend to a key another token of the same launch writes (prefill). In passes 1..14 of the depth loop
every token is the only new one of its row, so a program per (token, KV head) writes its key and value and then
reads them back with the row's earlier positions. Roundings are those two kernels' (their references are the
reference here): the normalized value rounded, times the weight rounded; the three RoPE products rounded; scores
in fp32 through exp2; probabilities rounded to the value dtype for P.V; output rounded.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from .qk_norm_rope import qk_norm_rope_ref
from .slot_attention import slot_attention_ref
from .utils import MAX, SUM, norm_rope


@triton.jit
def _cp_attend_kernel(qkv_ptr, qw_ptr, kw_ptr, cos_ptr, sin_ptr, pos_ptr, slots_ptr, k_ptr, v_ptr, o_ptr,
                      k_s0, k_s1, k_s2, v_s0, v_s1, v_s2, eps, qk_scale,
                      HQ: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr, BLOCK_G: tl.constexpr,
                      BLOCK_P: tl.constexpr):
    # qkv [N, (HQ + 2 HKV) * D] and o [N, HQ * D] contiguous; store [S, HKV, P, D] strides (s0, s1, s2, 1).
    # grid: (N, HKV): one token and one KV head per program, with its GROUP query heads.
    t = tl.program_id(0).to(tl.int64)
    j = tl.program_id(1).to(tl.int64)
    GROUP: tl.constexpr = HQ // HKV
    dtype = o_ptr.dtype.element_ty
    d = tl.arange(0, D)
    partner = tl.where(d < D // 2, d + D // 2, d - D // 2)
    sign = tl.where(d < D // 2, -1.0, 1.0)[None, :]
    pos = tl.load(pos_ptr + t).to(tl.int64)
    slot = tl.load(slots_ptr + t).to(tl.int64)
    row = qkv_ptr + t * ((HQ + 2 * HKV) * D)
    cos = tl.load(cos_ptr + pos * D + d).to(tl.float32)[None, :]
    sin = tl.load(sin_ptr + pos * D + d).to(tl.float32)[None, :]

    # the key and value of this token, into the store
    k_head = row + (HQ + j) * D
    kw = tl.load(kw_ptr + d).to(tl.float32)[None, :]
    kwp = tl.load(kw_ptr + partner).to(tl.float32)[None, :]
    k = norm_rope(tl.load(k_head + d).to(tl.float32)[None, :], tl.load(k_head + partner).to(tl.float32)[None, :],
                   kw, kwp, cos, sin, sign, eps, D, dtype)  # [1, D]
    tl.store(k_ptr + slot * k_s0 + j * k_s1 + pos * k_s2 + d[None, :], k)
    v = tl.load(row + (HQ + HKV + j) * D + d)
    tl.store(v_ptr + slot * v_s0 + j * v_s1 + pos * v_s2 + d, v)
    tl.debug_barrier()  # the program reads back what its threads just wrote

    # its query heads
    g = tl.arange(0, BLOCK_G)
    g_ok = g < GROUP
    q_heads = row + (j * GROUP + g)[:, None] * D
    qw = tl.load(qw_ptr + d).to(tl.float32)[None, :]
    qwp = tl.load(qw_ptr + partner).to(tl.float32)[None, :]
    q = norm_rope(tl.load(q_heads + d[None, :], mask=g_ok[:, None], other=0.0).to(tl.float32),
                   tl.load(q_heads + partner[None, :], mask=g_ok[:, None], other=0.0).to(tl.float32), qw, qwp, cos,
                   sin, sign, eps, D, dtype).to(tl.float32)

    # attention over positions 0..pos, one block
    n = tl.arange(0, BLOCK_P)
    n_ok = n <= pos
    keys = tl.load(k_ptr + slot * k_s0 + j * k_s1 + n[:, None].to(tl.int64) * k_s2 + d[None, :],
                   mask=n_ok[:, None], other=0.0).to(tl.float32)  # [P, D]
    values = tl.load(v_ptr + slot * v_s0 + j * v_s1 + n[:, None].to(tl.int64) * v_s2 + d[None, :],
                     mask=n_ok[:, None], other=0.0).to(tl.float32)
    s = tl.reduce(q[:, None, :] * keys[None, :, :], 2, SUM) * qk_scale  # [G, P]
    s = tl.where(n_ok[None, :], s, -1.0e30)
    m = tl.reduce(s, 1, MAX)
    p = tl.exp2(s - m[:, None])
    denom = tl.reduce(p, 1, SUM)
    p = p.to(dtype).to(tl.float32)
    o = tl.reduce(p[:, :, None] * values[None, :, :], 1, SUM) / denom[:, None]  # [G, D]
    tl.store(o_ptr + t * (HQ * D) + (j * GROUP + g)[:, None] * D + d[None, :], o.to(dtype), mask=g_ok[:, None])


def _check(qkv: torch.Tensor, k_store: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor, heads: int,
           kv_heads: int, d: int) -> None:
    assert qkv.is_contiguous() and qkv.shape[1] == (heads + 2 * kv_heads) * d, (qkv.shape, heads, kv_heads, d)
    assert k_store.shape[1] == kv_heads and k_store.shape[3] == d and k_store.stride(3) == 1, k_store.shape
    assert positions.shape == slots.shape == (qkv.shape[0],), (positions.shape, slots.shape)
    assert heads % kv_heads == 0 and d & (d - 1) == 0, (heads, kv_heads, d)


def cp_attend(qkv: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor, cos: torch.Tensor,
              sin: torch.Tensor, positions: torch.Tensor, k_store: torch.Tensor, v_store: torch.Tensor,
              slots: torch.Tensor, heads: int, kv_heads: int, eps: float) -> torch.Tensor:
    """qkv [N, (heads + 2 kv_heads) * D] (one new token per store row: slots distinct), q/k norm weights [D],
    cos/sin [P, D], positions/slots [N] int64, stores [S, kv_heads, P, D] -> attention output [N, heads * D]; the
    token's key and value are written into the stores at (slots[i], :, positions[i])."""
    d = q_weight.shape[0]
    _check(qkv, k_store, positions, slots, heads, kv_heads, d)
    n = qkv.shape[0]
    o = torch.empty((n, heads * d), dtype=qkv.dtype, device=qkv.device)
    if n == 0:
        return o
    _cp_attend_kernel[(n, kv_heads)](
        qkv, q_weight, k_weight, cos, sin, positions, slots, k_store, v_store, o,
        k_store.stride(0), k_store.stride(1), k_store.stride(2), v_store.stride(0), v_store.stride(1),
        v_store.stride(2), eps, math.log2(math.e) / math.sqrt(d), HQ=heads, HKV=kv_heads, D=d,
        BLOCK_G=triton.next_power_of_2(heads // kv_heads), BLOCK_P=triton.next_power_of_2(k_store.shape[2]),
        num_warps=4)
    return o


def cp_attend_ref(qkv: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor, cos: torch.Tensor,
                  sin: torch.Tensor, positions: torch.Tensor, k_store: torch.Tensor, v_store: torch.Tensor,
                  slots: torch.Tensor, heads: int, kv_heads: int, eps: float) -> torch.Tensor:
    """The unfused pair's references: q/k-norm + RoPE + the store writes, then attention over positions 0..pos."""
    d = q_weight.shape[0]
    _check(qkv, k_store, positions, slots, heads, kv_heads, d)
    q = qk_norm_rope_ref(qkv, q_weight, k_weight, cos, sin, positions, k_store, v_store, slots, heads, kv_heads,
                         eps)
    return slot_attention_ref(q, k_store, v_store, slots, positions + 1).reshape(qkv.shape[0], heads * d)

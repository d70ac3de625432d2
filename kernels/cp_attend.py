"""Attention of one new token per store row in one launch: q/k RMSNorm over head_dim, rotate-half RoPE at the
token's position, the key and value written into the store, and attention over the row's positions 0..position.

The stack's general path spends two launches here (kernels/qk_norm_rope.py, then kernels/slot_attention.py)
because a token may attend to a key another token of the same launch writes (a prompt's tokens, or the depth
loop's first pass, two tokens a row). Where every token is the only new one of its store row (a decode step's
Talker rows, passes 1..14 of the depth loop, the depth loop's own `depth = fused`), a program per (token, KV head)
writes its key and value, then reads them back with the row's earlier positions: one launch a layer fewer, and
the queries never leave the program.

The arithmetic is those two kernels': the normalized value rounded, times the weight rounded; the three RoPE
products rounded (with `residual`, each input first scaled by 1 / RMS of its token's residual row and rounded, the
folded input norm: fused_stack.py's `fold_norms`); the queries rounded to the dtype; scores in fp32 through exp2
over key blocks of slot_attention's size (an online softmax, kernels/utils.softmax_block), probabilities rounded
to the value dtype for P.V, the output rounded. With the same key blocks only the head norms' sums may run in
another order than qk_norm_rope's (an fp32 ulp).
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from .qk_norm_rope import qk_norm_rope_ref
from .slot_attention import BLOCK_N, slot_attention_ref
from .utils import interpreted, norm_rope, pdl_launch, row_rstd, softmax_block, wait_for_inputs


@triton.jit
def _scaled(ptr, scale, HAS_RES: tl.constexpr, dtype: tl.constexpr):
    """Values at ptr as fp32, with HAS_RES times the row's 1 / RMS and rounded to dtype (the folded input norm)."""
    x = tl.load(ptr).to(tl.float32)
    if HAS_RES:
        x = (x * scale).to(dtype).to(tl.float32)
    return x


@triton.jit
def _cp_attend_kernel(qkv_ptr, qw_ptr, kw_ptr, cos_ptr, sin_ptr, pos_ptr, slots_ptr, k_ptr, v_ptr, o_ptr, res_ptr,
                      k_s0, k_s1, k_s2, v_s0, v_s1, v_s2, H, eps, qk_scale,
                      HQ: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr, BLOCK_G: tl.constexpr,
                      BLOCK_KEYS: tl.constexpr, HAS_RES: tl.constexpr, BLOCK_H: tl.constexpr,
                      DOT_DTYPE: tl.constexpr, PRECISION: tl.constexpr, PDL: tl.constexpr):
    # qkv [N, (HQ + 2 HKV) * D] and o [N, HQ * D] contiguous; store [S, HKV, P, D] strides (s0, s1, s2, 1);
    # HAS_RES: res [N, H] contiguous. grid: (N, HKV): one token and one KV head per program, with its GROUP query
    # heads (padded to BLOCK_G >= 16 rows for tl.dot).
    wait_for_inputs(PDL)
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
    scale = 1.0
    if HAS_RES:
        scale = row_rstd(res_ptr + t * H, H, eps, BLOCK_H)

    # the key and value of this token, into the store
    k_head = row + (HQ + j) * D
    kw = tl.load(kw_ptr + d).to(tl.float32)[None, :]
    kwp = tl.load(kw_ptr + partner).to(tl.float32)[None, :]
    k = norm_rope(_scaled(k_head + d, scale, HAS_RES, dtype)[None, :],
                  _scaled(k_head + partner, scale, HAS_RES, dtype)[None, :], kw, kwp, cos, sin, sign, eps, D, dtype)
    tl.store(k_ptr + slot * k_s0 + j * k_s1 + pos * k_s2 + d[None, :], k)
    v = _scaled(row + (HQ + HKV + j) * D + d, scale, HAS_RES, dtype).to(dtype)
    tl.store(v_ptr + slot * v_s0 + j * v_s1 + pos * v_s2 + d, v)
    tl.debug_barrier()  # the program reads back what its threads just wrote

    # its query heads, normalized and rotated, rounded as a stored query would be
    g = tl.arange(0, BLOCK_G)
    g_ok = g < GROUP
    q_heads = row + (j * GROUP + g)[:, None] * D
    qw = tl.load(qw_ptr + d).to(tl.float32)[None, :]
    qwp = tl.load(qw_ptr + partner).to(tl.float32)[None, :]
    qx = tl.load(q_heads + d[None, :], mask=g_ok[:, None], other=0.0).to(tl.float32)
    qxp = tl.load(q_heads + partner[None, :], mask=g_ok[:, None], other=0.0).to(tl.float32)
    if HAS_RES:
        qx = (qx * scale).to(dtype).to(tl.float32)
        qxp = (qxp * scale).to(dtype).to(tl.float32)
    q = norm_rope(qx, qxp, qw, qwp, cos, sin, sign, eps, D, dtype).to(DOT_DTYPE)

    # attention over positions 0..pos, BLOCK_KEYS keys a step
    m = tl.full((BLOCK_G,), -1.0e30, tl.float32)
    denom = tl.full((BLOCK_G,), 0.0, tl.float32)
    acc = tl.full((BLOCK_G, D), 0.0, tl.float32)
    k_base = k_ptr + slot * k_s0 + j * k_s1
    v_base = v_ptr + slot * v_s0 + j * v_s1
    length = pos + 1
    for blk in range(0, (length + BLOCK_KEYS - 1) // BLOCK_KEYS):
        n = blk * BLOCK_KEYS + tl.arange(0, BLOCK_KEYS)
        n_ok = n < length
        keys = tl.load(k_base + n[:, None].to(tl.int64) * k_s2 + d[None, :], mask=n_ok[:, None], other=0.0)
        values = tl.load(v_base + n[:, None].to(tl.int64) * v_s2 + d[None, :], mask=n_ok[:, None], other=0.0)
        m, denom, acc = softmax_block(q, keys, values, n_ok[None, :], m, denom, acc, qk_scale, dtype, DOT_DTYPE,
                                      PRECISION)
    o = acc / denom[:, None]
    tl.store(o_ptr + t * (HQ * D) + (j * GROUP + g)[:, None] * D + d[None, :], o.to(dtype), mask=g_ok[:, None])


# The interpreter's bf16 dots are wrong (utils.interpreted): interpreted, they take the values upcast to fp32.
_DOT_UPCAST = interpreted(_cp_attend_kernel)


def _check(qkv: torch.Tensor, k_store: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor, heads: int,
           kv_heads: int, d: int, residual: torch.Tensor | None) -> None:
    assert qkv.is_contiguous() and qkv.shape[1] == (heads + 2 * kv_heads) * d, (qkv.shape, heads, kv_heads, d)
    assert k_store.shape[1] == kv_heads and k_store.shape[3] == d and k_store.stride(3) == 1, k_store.shape
    assert positions.shape == slots.shape == (qkv.shape[0],), (positions.shape, slots.shape)
    assert heads % kv_heads == 0 and d & (d - 1) == 0 and d >= 16, (heads, kv_heads, d)
    assert residual is None or (residual.dim() == 2 and residual.shape[0] == qkv.shape[0]
                                and residual.is_contiguous() and residual.dtype == qkv.dtype), residual


def cp_attend(qkv: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor, cos: torch.Tensor,
              sin: torch.Tensor, positions: torch.Tensor, k_store: torch.Tensor, v_store: torch.Tensor,
              slots: torch.Tensor, heads: int, kv_heads: int, eps: float, residual: torch.Tensor | None = None,
              pdl: bool | str = False) -> torch.Tensor:
    """qkv [N, (heads + 2 kv_heads) * D] (one new token per store row: slots distinct), q/k norm weights [D],
    cos/sin [P, D], positions/slots [N] int64, stores [S, kv_heads, P, D] -> attention output [N, heads * D] over
    positions 0..positions[i]; the token's key and value are written into the stores at (slots[i], :,
    positions[i]) first. `residual` [N, H]: qkv is first scaled by 1 / RMS of its rows (the folded input norm; the
    same eps). `pdl`: launched with programmatic dependent launch (kernels/utils.py)."""
    d = q_weight.shape[0]
    _check(qkv, k_store, positions, slots, heads, kv_heads, d, residual)
    n = qkv.shape[0]
    o = torch.empty((n, heads * d), dtype=qkv.dtype, device=qkv.device)
    if n == 0:
        return o
    f32_dots = qkv.dtype == torch.float32 or _DOT_UPCAST
    width = residual.shape[1] if residual is not None else 1
    on, extra = pdl_launch(_cp_attend_kernel, pdl)
    _cp_attend_kernel[(n, kv_heads)](
        qkv, q_weight, k_weight, cos, sin, positions, slots, k_store, v_store, o,
        residual if residual is not None else qkv,
        k_store.stride(0), k_store.stride(1), k_store.stride(2), v_store.stride(0), v_store.stride(1),
        v_store.stride(2), width, eps, math.log2(math.e) / math.sqrt(d), HQ=heads, HKV=kv_heads, D=d,
        BLOCK_G=max(16, triton.next_power_of_2(heads // kv_heads)),
        BLOCK_KEYS=min(BLOCK_N, max(16, triton.next_power_of_2(k_store.shape[2]))),
        HAS_RES=residual is not None, BLOCK_H=triton.next_power_of_2(width),
        DOT_DTYPE=tl.float32 if f32_dots else tl.bfloat16, PRECISION="ieee" if f32_dots else None, PDL=on,
        num_warps=4, **extra)  # fp32 dots must not round to TF32
    return o


def cp_attend_ref(qkv: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor, cos: torch.Tensor,
                  sin: torch.Tensor, positions: torch.Tensor, k_store: torch.Tensor, v_store: torch.Tensor,
                  slots: torch.Tensor, heads: int, kv_heads: int, eps: float,
                  residual: torch.Tensor | None = None) -> torch.Tensor:
    """The unfused pair's references: q/k-norm + RoPE + the store writes, then attention over positions 0..pos.
    On the CPU (the tests, the CPU engine) it checks what the kernel needs: tokens sharing a store row share its
    position too (padding rows, whose outputs nobody reads), so that no program reads a key another one writes.
    On a GPU the check would wait for the device, and cannot run inside a graph's capture: skipped there."""
    d = q_weight.shape[0]
    _check(qkv, k_store, positions, slots, heads, kv_heads, d, residual)
    if slots.device.type == "cpu":
        pairs = torch.unique(torch.stack([slots, positions]), dim=1)
        assert pairs.shape[1] == slots.unique().numel(), "two tokens of one store row at different positions"
    q = qk_norm_rope_ref(qkv, q_weight, k_weight, cos, sin, positions, k_store, v_store, slots, heads, kv_heads,
                         eps, residual=residual)
    return slot_attention_ref(q, k_store, v_store, slots, positions + 1).reshape(qkv.shape[0], heads * d)

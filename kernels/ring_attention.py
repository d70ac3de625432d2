"""One streaming step of the codec decoder's sliding-window attention: RoPE, attention over [ring | new keys], and
the ring update, fused in one kernel per layer.

Each stream keeps the rotated keys and values of its last R positions in a ring (position p in row p % R) inside
a slot pool; a step brings T new frames per row (n[b] <= T of them real). Query t of row b (absolute position
P = pos0[b] + t) attends to positions max(0, P - R) .. P: those before pos0 come from the ring, the rest are this
step's keys t' <= t. Afterwards the ring holds the last R positions of each row (at most R of its new frames).

One program per (row, head) owns that head's columns of the row's ring slot, so it can read every ring row it
needs before it overwrites any: no second pass and no scratch buffer. All shapes depend only on (B, T) and nothing
syncs with the host, so the call can be captured in a CUDA graph.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from .utils import MAX, SUM, interpreted


@triton.jit
def _rope(x_ptr, offs_2d, offs_rot_2d, sign_2d, cos, sin, mask):
    # x * cos + rotate_half(x) * sin in fp32; rotate_half is a permuted (and half negated) reload of the same row.
    x = tl.load(x_ptr + offs_2d, mask=mask, other=0.0).to(tl.float32)
    xr = tl.load(x_ptr + offs_rot_2d, mask=mask, other=0.0).to(tl.float32)
    return x * cos + sign_2d * xr * sin


@triton.jit
def _ring_attention_kernel(qkv_ptr, cos_ptr, sin_ptr, rk_ptr, rv_ptr, slots_ptr, pos0_ptr, n_ptr, o_ptr,
                           T, R, qk_scale, rk_s0, rk_s1, rv_s0, rv_s1,
                           HD: tl.constexpr, D: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_T: tl.constexpr,
                           BLOCK_R: tl.constexpr,
                           DOT_DTYPE: tl.constexpr, PRECISION: tl.constexpr):
    # qkv [B, T, 3*HD], cos/sin [B, T, D], o [B, T, HD]: contiguous. ring k/v [slots, R, HD]: strides (s0, s1, 1).
    # qk_scale = log2(e) / sqrt(D) (softmax via exp2). Dot operands are cast to DOT_DTYPE (a no-op but in the
    # interpreter, see _DOT_UPCAST). grid: (B, heads).
    b = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1)
    dtype = o_ptr.dtype.element_ty
    slot = tl.load(slots_ptr + b)
    pos0 = tl.load(pos0_ptr + b)
    n = tl.load(n_ptr + b)

    t = tl.arange(0, BLOCK_T)
    d = tl.arange(0, BLOCK_D)  # head_dim padded to >= 16 for tl.dot (the tiny test codec has 8)
    d_ok = d < D
    j = tl.arange(0, BLOCK_R)
    t_ok = t < T
    io_mask = t_ok[:, None] & d_ok[None, :]

    # This step's q and k, rotated in fp32 and rounded once to the storage dtype (as stored in the ring).
    d_rot = tl.where(d < D // 2, d + D // 2, d - D // 2)
    sign = tl.where(d < D // 2, -1.0, 1.0)[None, :]
    row = b * T + t
    qkv_row = qkv_ptr + row[:, None] * (3 * HD) + h * D
    cs_offs = row[:, None] * D + d[None, :]
    cos = tl.load(cos_ptr + cs_offs, mask=io_mask, other=0.0).to(tl.float32)
    sin = tl.load(sin_ptr + cs_offs, mask=io_mask, other=0.0).to(tl.float32)
    q = _rope(qkv_row, d[None, :], d_rot[None, :], sign, cos, sin, io_mask).to(dtype)
    k = _rope(qkv_row + HD, d[None, :], d_rot[None, :], sign, cos, sin, io_mask).to(dtype)
    v = tl.load(qkv_row + 2 * HD + d[None, :], mask=io_mask, other=0.0)

    # The ring before the step: row j holds position pos0 - R + ((j - pos0) mod R) when that is >= 0 (operands
    # kept non-negative so that the remainder's sign convention does not matter).
    j_ok = j < R
    ring_pos = pos0 - R + (j - pos0 % R + R) % R
    rk_row = rk_ptr + slot * rk_s0 + j[:, None] * rk_s1 + h * D + d[None, :]
    rv_row = rv_ptr + slot * rv_s0 + j[:, None] * rv_s1 + h * D + d[None, :]
    rk = tl.load(rk_row, mask=j_ok[:, None] & d_ok[None, :], other=0.0)
    rv = tl.load(rv_row, mask=j_ok[:, None] & d_ok[None, :], other=0.0)

    # Scores against the ring and against this step's keys; the window is self + R past, causal. Masked scores
    # are finite so that a padding query row with nothing to attend to gives garbage, not NaN.
    q_pos = pos0 + t
    qm, km, vm = q.to(DOT_DTYPE), k.to(DOT_DTYPE), v.to(DOT_DTYPE)
    s_ring = tl.dot(qm, tl.trans(rk.to(DOT_DTYPE)), input_precision=PRECISION) * qk_scale
    ring_ok = j_ok[None, :] & (ring_pos[None, :] >= 0) & (q_pos[:, None] - ring_pos[None, :] <= R)
    s_ring = tl.where(ring_ok, s_ring, -1.0e30)
    s_new = tl.dot(qm, tl.trans(km), input_precision=PRECISION) * qk_scale
    lag = t[:, None] - t[None, :]
    new_ok = (lag >= 0) & (lag <= R) & t_ok[None, :]
    s_new = tl.where(new_ok, s_new, -1.0e30)

    m = tl.maximum(tl.reduce(s_ring, 1, MAX), tl.reduce(s_new, 1, MAX))
    p_ring = tl.exp2(s_ring - m[:, None])
    p_new = tl.exp2(s_new - m[:, None])
    denom = tl.reduce(p_ring, 1, SUM) + tl.reduce(p_new, 1, SUM)
    # Probabilities rounded to the value dtype for the P.V dots; the denominator sums them unrounded in fp32.
    acc = tl.dot(p_ring.to(dtype).to(DOT_DTYPE), rv.to(DOT_DTYPE), input_precision=PRECISION)
    acc = tl.dot(p_new.to(dtype).to(DOT_DTYPE), vm, acc, input_precision=PRECISION)
    o = acc / denom[:, None]
    tl.store(o_ptr + row[:, None] * HD + h * D + d[None, :], o.to(dtype), mask=io_mask)

    # Ring update: the last min(n, R) real frames, each into row (pos0 + t) % R. Other warps of this program may
    # hold ring rows this overwrites; the barrier makes every warp's ring loads complete before any store.
    tl.debug_barrier()
    w_ok = ((t < n) & (t >= n - R))[:, None] & d_ok[None, :]
    w_row = (pos0 + t) % R
    tl.store(rk_ptr + slot * rk_s0 + w_row[:, None] * rk_s1 + h * D + d[None, :], k, mask=w_ok)
    tl.store(rv_ptr + slot * rv_s0 + w_row[:, None] * rv_s1 + h * D + d[None, :], v, mask=w_ok)


# The interpreter's bf16 dots are wrong (utils.interpreted): interpreted, they take the values upcast to fp32.
_DOT_UPCAST = interpreted(_ring_attention_kernel)


def _check(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, ring_k: torch.Tensor, ring_v: torch.Tensor,
           slots: torch.Tensor, pos0: torch.Tensor, n: torch.Tensor, heads: int, head_dim: int) -> None:
    B, T, width = qkv.shape
    hd = heads * head_dim
    assert width == 3 * hd and qkv.is_contiguous(), (qkv.shape, heads, head_dim)
    assert cos.shape == sin.shape == (B, T, head_dim) and cos.is_contiguous() and sin.is_contiguous(), cos.shape
    assert cos.dtype == sin.dtype == qkv.dtype, (cos.dtype, sin.dtype, qkv.dtype)
    assert ring_k.dim() == 3 and ring_k.shape[2] == hd and ring_v.shape == ring_k.shape, (ring_k.shape, ring_v.shape)
    assert ring_k.dtype == ring_v.dtype == qkv.dtype, (ring_k.dtype, qkv.dtype)
    assert ring_k.stride(2) == 1 and ring_v.stride(2) == 1, (ring_k.stride(), ring_v.stride())
    assert slots.shape == pos0.shape == n.shape == (B,), (slots.shape, pos0.shape, n.shape)
    assert slots.dtype == pos0.dtype == n.dtype == torch.int64, (slots.dtype, pos0.dtype, n.dtype)


def ring_attention(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, ring_k: torch.Tensor,
                   ring_v: torch.Tensor, slots: torch.Tensor, pos0: torch.Tensor, n: torch.Tensor, heads: int,
                   head_dim: int, num_warps: int = 4) -> torch.Tensor:
    """qkv [B, T, 3*heads*head_dim] (q | k | v, q and k not rotated; bf16 or fp32), cos/sin [B, T, head_dim]
    (rotate-half RoPE tables of positions pos0[b] + t), ring_k/ring_v [num_slots, R, HD] (views; last dim
    contiguous), slots/pos0/n [B] int64 -> o [B, T, HD]. Rows t >= n[b] are padding: garbage out, nothing
    written. Writes the rotated keys and the values of each row's last min(n, R) real frames into its ring.
    num_warps per (row, head) program: the step is latency-bound (33 us per layer at 128 x 1 on the H200, ~9 us of
    memory traffic); 2 warps were measured slower (3.12 against 3.02 ms per step, docs/codec.md)."""
    _check(qkv, cos, sin, ring_k, ring_v, slots, pos0, n, heads, head_dim)
    B, T, _ = qkv.shape
    R = ring_k.shape[1]
    assert 1 <= T <= 64 and R >= 1, (T, R)
    # arange needs a power of two (head_dim is 64 in the model); below 16 it is padded for tl.dot.
    assert head_dim & (head_dim - 1) == 0 and head_dim % 2 == 0, head_dim
    assert qkv.dtype in (torch.bfloat16, torch.float32), qkv.dtype
    o = torch.empty((B, T, heads * head_dim), dtype=qkv.dtype, device=qkv.device)
    if B == 0:
        return o
    f32_dots = qkv.dtype == torch.float32 or _DOT_UPCAST
    _ring_attention_kernel[(B, heads)](
        qkv, cos, sin, ring_k, ring_v, slots, pos0, n, o, T, R, math.log2(math.e) / math.sqrt(head_dim),
        ring_k.stride(0), ring_k.stride(1), ring_v.stride(0), ring_v.stride(1),
        HD=heads * head_dim, D=head_dim, BLOCK_D=max(16, head_dim), BLOCK_T=max(16, triton.next_power_of_2(T)),
        BLOCK_R=max(16, triton.next_power_of_2(R)), DOT_DTYPE=tl.float32 if f32_dots else tl.bfloat16,
        PRECISION="ieee" if f32_dots else None, num_warps=num_warps)  # fp32 dots must not round to TF32
    return o


@triton.jit
def _rope_rows_kernel(pos0_ptr, inv_freq_ptr, cos_ptr, sin_ptr, T, D: tl.constexpr, BLOCK_D: tl.constexpr):
    # cos/sin [B, T, D] of positions pos0[b] + t: the angle in fp32 as rope_tables multiplies it (position times
    # inv_freq[d % (D/2)]), its cos and sin (libdevice's, as PyTorch's CUDA ops), rounded once. grid: (B * T,).
    row = tl.program_id(0).to(tl.int64)
    d = tl.arange(0, BLOCK_D)
    ok = d < D
    position = (tl.load(pos0_ptr + row // T) + row % T).to(tl.float32)
    angle = position * tl.load(inv_freq_ptr + d % (D // 2), mask=ok, other=0.0)
    dtype = cos_ptr.dtype.element_ty
    tl.store(cos_ptr + row * D + d, tl.cos(angle).to(dtype), mask=ok)
    tl.store(sin_ptr + row * D + d, tl.sin(angle).to(dtype), mask=ok)


def rope_rows(pos0: torch.Tensor, frames: int, inv_freq: torch.Tensor,
              dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """The cos/sin tables ring_attention takes, [B, frames, head_dim] in dtype, for positions pos0[b] + t, in one
    launch instead of rope_tables' ~10 (rope_rows_ref); inv_freq [head_dim / 2] fp32 (model.layers.rope_inv_freq)."""
    assert pos0.dim() == 1 and pos0.dtype == torch.int64 and inv_freq.dtype == torch.float32, (pos0, inv_freq)
    b, d = pos0.shape[0], 2 * inv_freq.shape[0]
    cos = torch.empty((b, frames, d), dtype=dtype, device=pos0.device)
    sin = torch.empty_like(cos)
    if cos.numel():
        _rope_rows_kernel[(b * frames,)](pos0, inv_freq.contiguous(), cos, sin, frames, D=d,
                                         BLOCK_D=triton.next_power_of_2(d), num_warps=1)
    return cos, sin


def rope_rows_ref(pos0: torch.Tensor, frames: int, inv_freq: torch.Tensor,
                  dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """The same from PyTorch's ops (model.layers.rope_tables' order: angles, the two halves, cos and sin, cast)."""
    positions = pos0[:, None] + torch.arange(frames, device=pos0.device)
    freqs = positions.float()[..., None] * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def _rope_ref(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # x [B, T, H, D]; cos/sin [B, T, D]: rotated in fp32, rounded once to x's dtype.
    xf, half = x.float(), x.shape[-1] // 2
    rot = torch.cat((-xf[..., half:], xf[..., :half]), dim=-1)
    return (xf * cos.float()[:, :, None] + rot * sin.float()[:, :, None]).to(x.dtype)


def ring_attention_ref(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, ring_k: torch.Tensor,
                       ring_v: torch.Tensor, slots: torch.Tensor, pos0: torch.Tensor, n: torch.Tensor, heads: int,
                       head_dim: int) -> torch.Tensor:
    """The same in plain PyTorch (any T, head_dim, device), attention in fp32. The ring write selects rows with a
    boolean mask, so on CUDA it syncs with the host: a reference and CPU path, not for CUDA graphs."""
    _check(qkv, cos, sin, ring_k, ring_v, slots, pos0, n, heads, head_dim)
    B, T, _ = qkv.shape
    R, hd = ring_k.shape[1], heads * head_dim
    x = qkv.view(B, T, 3, heads, head_dim)
    q, k, v = _rope_ref(x[:, :, 0], cos, sin), _rope_ref(x[:, :, 1], cos, sin), x[:, :, 2]

    dev = qkv.device
    j = torch.arange(R, device=dev)
    t = torch.arange(T, device=dev)
    ring_pos = pos0[:, None] - R + (j[None, :] - pos0[:, None]) % R  # [B, R]
    q_pos = pos0[:, None] + t[None, :]  # [B, T]
    ring_ok = (ring_pos[:, None, :] >= 0) & (q_pos[:, :, None] - ring_pos[:, None, :] <= R)  # [B, T, R]
    lag = t[:, None] - t[None, :]
    new_ok = ((lag >= 0) & (lag <= R)).expand(B, T, T)
    ok = torch.cat((ring_ok, new_ok), dim=2)  # [B, T, R + T]

    keys = torch.cat((ring_k[slots].view(B, R, heads, head_dim), k), dim=1).float()
    vals = torch.cat((ring_v[slots].view(B, R, heads, head_dim), v), dim=1).float()
    o = F.scaled_dot_product_attention(q.float().transpose(1, 2), keys.transpose(1, 2), vals.transpose(1, 2),
                                       attn_mask=ok[:, None])
    o = o.transpose(1, 2).reshape(B, T, hd).to(qkv.dtype)

    # Ring update (after the gather above read the old contents).
    w = (t[None, :] < n[:, None]) & (t[None, :] >= n[:, None] - R)  # [B, T]
    w_slot = slots[:, None].expand(B, T)[w]
    w_row = (q_pos % R)[w]
    ring_k[w_slot, w_row] = k.reshape(B, T, hd)[w]
    ring_v[w_slot, w_row] = v.reshape(B, T, hd)[w]
    return o

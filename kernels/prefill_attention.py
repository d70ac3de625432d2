"""Causal attention of whole prompts packed back to back, a block of query tokens per program (the aligner's call).

slot_attention.py gives every token a program of its own, which suits a decode step (one token a stream) but not
a call that brings every token of many prompts at once: each of a prompt's T tokens reads the prompt's keys again,
and its two query heads fill a 16-row dot. Here a program takes up to BLOCK_M consecutive tokens of one prompt
and one KV head (its GROUP query heads as BLOCK_M x GROUP rows of one tile) and reads each key block once for all
of them, masking causally: token m of a block at position pos0 + m sees positions 0 .. pos0 + m of its slot.

The blocks are a table built on the host (`block_table`): for block b, its first token in q (`tok0`), its slot, the
first token's position and how many tokens it has (0: an idle program, so a captured call can launch a fixed grid
for its bucket). The caller writes every token's key and value into the slot store first (qk_norm_rope.py), so a
block's keys are the prompt's earlier tokens and its own. The result equals slot_attention's for every token.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from .slot_attention import slot_attention_ref
from .utils import interpreted, softmax_block

BLOCK_M = 32  # query tokens a program
BLOCK_N = 64  # keys a loop step


@triton.jit
def _prefill_attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, table_ptr, qk_scale,
                              q_s0, q_s1, k_s0, k_s1, k_s2, v_s0, v_s1, v_s2, o_s0, o_s1,
                              GROUP: tl.constexpr, GROUP_P2: tl.constexpr, D: tl.constexpr, BLOCK_D: tl.constexpr,
                              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DOT_DTYPE: tl.constexpr,
                              PRECISION: tl.constexpr):
    # table [blocks, 4] int64: tok0, slot, pos0, count. Rows r of the tile: token r // GROUP_P2, head r % GROUP_P2.
    # qk_scale = log2(e) / sqrt(D): softmax through exp2. grid: (blocks, Hkv).
    blk = tl.program_id(0).to(tl.int64)
    kvh = tl.program_id(1).to(tl.int64)
    count = tl.load(table_ptr + blk * 4 + 3)
    if count > 0:
        tok0 = tl.load(table_ptr + blk * 4)
        slot = tl.load(table_ptr + blk * 4 + 1)
        pos0 = tl.load(table_ptr + blk * 4 + 2)
        dtype = o_ptr.dtype.element_ty
        r = tl.arange(0, BLOCK_M * GROUP_P2)
        m = r // GROUP_P2
        g = r % GROUP_P2
        d = tl.arange(0, BLOCK_D)
        row_ok = (m < count) & (g < GROUP)
        d_ok = d < D
        tok = tok0 + m
        q_rows = q_ptr + tok[:, None] * q_s0 + (kvh * GROUP + g)[:, None] * q_s1 + d[None, :]
        q = tl.load(q_rows, mask=row_ok[:, None] & d_ok[None, :], other=0.0).to(DOT_DTYPE)
        pos = pos0 + m  # each row's own position: it sees keys 0 .. pos

        acc = tl.full((BLOCK_M * GROUP_P2, BLOCK_D), 0.0, tl.float32)
        mx = tl.full((BLOCK_M * GROUP_P2,), -1.0e30, tl.float32)
        denom = tl.full((BLOCK_M * GROUP_P2,), 0.0, tl.float32)
        k_base = k_ptr + slot * k_s0 + kvh * k_s1
        v_base = v_ptr + slot * v_s0 + kvh * v_s1
        keys = pos0 + count  # the block's last token sees this many
        for start in range(0, keys, BLOCK_N):
            n = start + tl.arange(0, BLOCK_N)
            n_ok = n < keys
            kv_mask = n_ok[:, None] & d_ok[None, :]
            k = tl.load(k_base + n[:, None].to(tl.int64) * k_s2 + d[None, :], mask=kv_mask, other=0.0)
            v = tl.load(v_base + n[:, None].to(tl.int64) * v_s2 + d[None, :], mask=kv_mask, other=0.0)
            visible = n_ok[None, :] & (n[None, :] <= pos[:, None])  # causal: each row its own position
            mx, denom, acc = softmax_block(q, k, v, visible, mx, denom, acc, qk_scale, dtype, DOT_DTYPE, PRECISION)
        o = acc / denom[:, None]
        o_rows = o_ptr + tok[:, None] * o_s0 + (kvh * GROUP + g)[:, None] * o_s1 + d[None, :]
        tl.store(o_rows, o.to(dtype), mask=row_ok[:, None] & d_ok[None, :])


_DOT_UPCAST = interpreted(_prefill_attention_kernel)  # the interpreter's bf16 dots are wrong (utils.interpreted)


def block_table(lengths: list[int], block_m: int = BLOCK_M, rows: int | None = None) -> torch.Tensor:
    """Prompts of `lengths` tokens back to back, each in its own slot (0, 1, ...) at positions 0 .. T-1 -> the
    [blocks, 4] int64 table (tok0, slot, pos0, count) on the host, padded with idle rows to `rows` if given."""
    table: list[tuple[int, int, int, int]] = []
    tok0 = 0
    for slot, t in enumerate(lengths):
        table += [(tok0 + p, slot, p, min(block_m, t - p)) for p in range(0, t, block_m)]
        tok0 += t
    if rows is not None:
        if len(table) > rows:
            raise ValueError(f"{len(table)} blocks for a table of {rows}")
        table += [(0, 0, 0, 0)] * (rows - len(table))
    return torch.tensor(table, dtype=torch.int64).view(-1, 4)


def max_blocks(tokens: int, prompts: int, block_m: int = BLOCK_M) -> int:
    """The most blocks `prompts` prompts of `tokens` tokens in all can need: each prompt's last block may be short."""
    return tokens // block_m + prompts


def _check(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, table: torch.Tensor) -> None:
    _, hq, d = q.shape
    assert k_cache.dim() == 4 and v_cache.shape == k_cache.shape, (k_cache.shape, v_cache.shape)
    assert k_cache.shape[3] == d and hq % k_cache.shape[1] == 0, (q.shape, k_cache.shape)
    assert q.stride(2) == 1 and k_cache.stride(3) == 1 and v_cache.stride(3) == 1, "last dims must be contiguous"
    assert q.dtype == k_cache.dtype == v_cache.dtype and q.dtype in (torch.bfloat16, torch.float16, torch.float32)
    assert table.dim() == 2 and table.shape[1] == 4 and table.dtype == torch.int64, (table.shape, table.dtype)
    assert table.is_contiguous() and table.device == q.device


def prefill_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                      table: torch.Tensor) -> torch.Tensor:
    """q [N, Hq, D] (rotated), k_cache/v_cache [slots, Hkv, P, D] views, table [blocks, 4] (block_table, on q's
    device) -> o [N, Hq, D]: each token's causal attention over its slot's positions 0 .. its own. Tokens no block
    covers are left unwritten."""
    _check(q, k_cache, v_cache, table)
    n, hq, d = q.shape
    hkv = k_cache.shape[1]
    o = torch.empty((n, hq, d), dtype=q.dtype, device=q.device)
    if n == 0 or table.shape[0] == 0:
        return o
    group = hq // hkv
    f32_dots = q.dtype == torch.float32 or _DOT_UPCAST
    _prefill_attention_kernel[(table.shape[0], hkv)](
        q, k_cache, v_cache, o, table, math.log2(math.e) / math.sqrt(d),
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), o.stride(0), o.stride(1),
        GROUP=group, GROUP_P2=triton.next_power_of_2(group), D=d, BLOCK_D=max(16, triton.next_power_of_2(d)),
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, DOT_DTYPE=tl.float32 if f32_dots else tl.bfloat16,
        PRECISION="ieee" if f32_dots else None, num_warps=4)  # fp32 dots must not round to TF32
    return o


def prefill_attention_ref(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                          table: torch.Tensor) -> torch.Tensor:
    """The same through slot_attention_ref: every covered token's slot and length read from the table."""
    _check(q, k_cache, v_cache, table)
    n = q.shape[0]
    slots = torch.zeros(n, dtype=torch.int64, device=q.device)
    lengths = torch.ones(n, dtype=torch.int64, device=q.device)
    covered = torch.zeros(n, dtype=torch.bool, device=q.device)
    for tok0, slot, pos0, count in table.tolist():
        slots[tok0: tok0 + count] = slot
        lengths[tok0: tok0 + count] = torch.arange(pos0 + 1, pos0 + count + 1)
        covered[tok0: tok0 + count] = True
    o = torch.zeros_like(q)
    o[covered] = slot_attention_ref(q[covered], k_cache, v_cache, slots[covered], lengths[covered])
    return o

"""One pass of the code predictor's depth loop (all its decoder layers) in one persistent launch, for <= 16 rows.

A pass at 1-16 rows is launch-bound: the stack runs ~45 kernels a pass (~5 us each on the H200) where its ~157 MB
of bf16 weights take ~35 us to read. Here one CTA per SM walks every layer; each phase is split over the CTAs by
output columns (GEMV-shaped tiles of 16-32 weight rows, K looped, the row block padded to 16 for the MMA), and the
phases are separated by a grid barrier:

    per layer: RMSNorm + q|k|v  |  q/k-norm + RoPE + KV write + attention  |  o + residual
               |  RMSNorm + gate|up + SwiGLU  |  down + residual

The barrier is a global counter: each CTA adds 1 with release semantics after its stores, spins on a volatile
load until every CTA has arrived, then acquires; data other CTAs wrote in the launch is loaded with
cache_modifier=".cg" (L2, not the incoherent L1). The counter is handed back at zero by the last CTA to leave, so a
captured graph replays it without a memset. All CTAs must be co-resident: the grid is at most the SM count and a
CTA's resources are far below an SM's. One launch at a time per device (they share the counter).

Triton's interpreter runs programs one after another, so a spin barrier would never open: with `one_phase` (the
CPU, and a GPU fallback) the same body runs one phase per launch, 5 launches a layer, the barriers skipped.

Roundings are the fused stack's ops (fused_stack.py, through cp_linear.py's and cp_attend.py's, whose references
are the reference here): each projection's fp32 sum rounded to the model dtype; the normalized value rounded, then
times the weight rounded; the residual added in fp32 and rounded; SiLU of the rounded gate rounded, times the
rounded up, rounded; attention as cp_attend.py. They differ from the plain path only in fp32 summation orders (the
MMA's K tiles, the norms' and the softmax's reductions) and the softmax's exp taken as exp2 (as cp_attend.py).

Each phase first sends the next weighted phase's weights toward L2 (`prefetch.global.L2`, one address per 128-byte
line of the program's own tiles), so they are on their way while the barrier is closed. With `times`, each program
stamps every phase on both GPU clocks (depth_pass_clock.py reads them). What a pass costs against the `layers`
loop, with and without the prefetch, phase by phase: docs/benchmarks/h200-step-profile (slower at 8-16 rows, so
`layers` is the engine's default).
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from .cp_attend import cp_attend_ref
from .cp_linear import cp_linear_ref
from .utils import MAX, SUM, clocks, interpreted, norm_rope, prefetch_tiles

MAX_ROWS = 16  # one MMA row block; the depth loop takes its other paths above this
PHASES = 5  # a layer's phases, one barrier after each (but the pass's last)
_PHASES = tl.constexpr(PHASES)
_BARRIERS: dict[torch.device, torch.Tensor] = {}


@triton.jit
def _grid_sync(bar_ptr, target):
    tl.debug_barrier()  # every thread of the CTA has issued its stores
    tl.atomic_add(bar_ptr, 1, sem="release", scope="gpu")
    seen = tl.load(bar_ptr, volatile=True)
    while seen < target:
        seen = tl.load(bar_ptr, volatile=True)
    tl.atomic_add(bar_ptr, 0, sem="acquire", scope="gpu")
    tl.debug_barrier()


@triton.jit
def _stamp(times_ptr, pid, layer, phase: tl.constexpr, point: tl.constexpr, anchor, LAYERS: tl.constexpr):
    # times [programs, LAYERS, PHASES, 3 points, 2 clocks] int64: both clocks where program pid reaches this point
    ns, cycles = clocks(anchor)
    at = times_ptr + (((pid * LAYERS + layer) * _PHASES + phase) * 3 + point) * 2
    tl.store(at, ns)
    tl.store(at + 1, cycles)


@triton.jit
def _rows_rstd(src, R, K: tl.constexpr, eps, BLOCK_M: tl.constexpr, BK: tl.constexpr):
    # 1 / RMS of each row of src [R, K], from whole rows (before any tile's loop)
    rows = tl.arange(0, BLOCK_M)
    ks = tl.arange(0, BK)
    squares = tl.full((BLOCK_M,), 0.0, tl.float32)
    for k0 in range(0, K, BK):
        a = tl.load(src + rows[:, None] * K + k0 + ks[None, :], mask=(rows < R)[:, None], other=0.0,
                    cache_modifier=".cg").to(tl.float32)
        squares += tl.reduce(a * a, 1, SUM)
    return tl.rsqrt(squares / K + eps)


@triton.jit
def _tile(src, R, K: tl.constexpr, rstd, g_ptr, w_ptr, cols, HAS_NORM: tl.constexpr, dtype: tl.constexpr,
          BLOCK_M: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, DOT_DTYPE: tl.constexpr,
          PRECISION: tl.constexpr):
    # fp32 [BLOCK_M, BN]: (norm(src) or src) @ w[cols]^T; src [R, K], w [*, K]
    rows = tl.arange(0, BLOCK_M)
    ks = tl.arange(0, BK)
    acc = tl.full((BLOCK_M, BN), 0.0, tl.float32)
    for k0 in range(0, K, BK):
        a = tl.load(src + rows[:, None] * K + k0 + ks[None, :], mask=(rows < R)[:, None], other=0.0,
                    cache_modifier=".cg")
        if HAS_NORM:
            g = tl.load(g_ptr + k0 + ks).to(tl.float32)
            a = ((a.to(tl.float32) * rstd[:, None]).to(dtype).to(tl.float32) * g[None, :]).to(dtype)
        w = tl.load(w_ptr + cols[:, None] * K + k0 + ks[None, :])
        acc += tl.dot(a.to(DOT_DTYPE), tl.trans(w.to(DOT_DTYPE)), input_precision=PRECISION)
    return acc


@triton.jit
def _attend(row, o_row, qn_w, kn_w, cos_ptr, sin_ptr, pos, k_head, v_head, st_p, j, eps, qk_scale,
            HQ: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_P: tl.constexpr,
            dtype: tl.constexpr):
    # one token's KV head j (cp_attend.py's program): its key and value into the store at pos, then its query
    # heads over positions 0..pos. row: its q|k|v [(HQ + 2 HKV) D]; k_head/v_head: the store at (slot, j).
    GROUP: tl.constexpr = HQ // HKV
    d = tl.arange(0, D)
    partner = tl.where(d < D // 2, d + D // 2, d - D // 2)
    sign = tl.where(d < D // 2, -1.0, 1.0)[None, :]
    cos = tl.load(cos_ptr + pos * D + d).to(tl.float32)[None, :]
    sin = tl.load(sin_ptr + pos * D + d).to(tl.float32)[None, :]
    kh = row + (HQ + j) * D
    k = norm_rope(tl.load(kh + d, cache_modifier=".cg").to(tl.float32)[None, :],
                  tl.load(kh + partner, cache_modifier=".cg").to(tl.float32)[None, :],
                  tl.load(kn_w + d).to(tl.float32)[None, :], tl.load(kn_w + partner).to(tl.float32)[None, :],
                  cos, sin, sign, eps, D, dtype)
    tl.store(k_head + pos * st_p + d[None, :], k)
    tl.store(v_head + pos * st_p + d, tl.load(row + (HQ + HKV + j) * D + d, cache_modifier=".cg"))
    tl.debug_barrier()  # read back what this CTA's threads just wrote
    g = tl.arange(0, BLOCK_G)
    g_ok = (g < GROUP)[:, None]
    qh = row + (j * GROUP + g)[:, None] * D
    q = norm_rope(tl.load(qh + d[None, :], mask=g_ok, other=0.0, cache_modifier=".cg").to(tl.float32),
                  tl.load(qh + partner[None, :], mask=g_ok, other=0.0, cache_modifier=".cg").to(tl.float32),
                  tl.load(qn_w + d).to(tl.float32)[None, :], tl.load(qn_w + partner).to(tl.float32)[None, :],
                  cos, sin, sign, eps, D, dtype).to(tl.float32)
    n = tl.arange(0, BLOCK_P)
    n_ok = n <= pos
    keys = tl.load(k_head + n[:, None] * st_p + d[None, :], mask=n_ok[:, None], other=0.0,
                   cache_modifier=".cg").to(tl.float32)
    values = tl.load(v_head + n[:, None] * st_p + d[None, :], mask=n_ok[:, None], other=0.0,
                     cache_modifier=".cg").to(tl.float32)
    s = tl.reduce(q[:, None, :] * keys[None, :, :], 2, SUM) * qk_scale
    s = tl.where(n_ok[None, :], s, -1.0e30)
    p = tl.exp2(s - tl.reduce(s, 1, MAX)[:, None])
    denom = tl.reduce(p, 1, SUM)
    p = p.to(dtype).to(tl.float32)
    o = tl.reduce(p[:, :, None] * values[None, :, :], 1, SUM) / denom[:, None]
    tl.store(o_row + (j * GROUP + g)[:, None] * D + d[None, :], o.to(dtype), mask=g_ok)


@triton.jit
def _depth_pass_kernel(x_ptr, out_ptr, qkv_ptr, o_ptr, act_ptr, in_w, qkv_w, qn_w, kn_w, o_w, post_w, gu_w, down_w,
                       cos_ptr, sin_ptr, pos_ptr, slots_ptr, kv_ptr, bar_ptr, st_l, st_kv, st_s, st_h, st_p,
                       R, eps, qk_scale, first, last, phases,
                       H: tl.constexpr, INNER: tl.constexpr, HQ: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr,
                       BLOCK_G: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_M: tl.constexpr, BN_QKV: tl.constexpr,
                       BN_H: tl.constexpr, BN_I: tl.constexpr, BK: tl.constexpr, DOT_DTYPE: tl.constexpr,
                       PRECISION: tl.constexpr, SYNC: tl.constexpr, LAYERS: tl.constexpr, PREFETCH: tl.constexpr,
                       LINE: tl.constexpr, LINES_H: tl.constexpr, LINES_HO: tl.constexpr, LINES_I: tl.constexpr,
                       times_ptr=None, TIMES: tl.constexpr = False):
    # x/out [R, H] (the pass's input; the residual stream out), workspaces qkv [R, NQKV], o [R, HQ D], act [R, INNER];
    # weights stacked [LAYERS, ...] (fused_stack.py's order); store [L, 2, S, HKV, P, D] strides (st_l, st_kv, st_s,
    # st_h, st_p, 1). Runs layers first..last-1, the phases whose bit is set in `phases`; SYNC: a barrier after
    # each phase (one launch for all). Any grid: each phase loops its tiles over the programs. PREFETCH: each phase
    # first sends the next weighted phase's weights toward L2 (qkv: o's; attention: gate|up; o: down; gate|up: the
    # next layer's q|k|v, layer 0's after the last, which the next pass reads), so that phase reads them from L2
    # while the barrier before it is still closed. LINE: weight elements a 128-byte line; LINES_*: lines a row of
    # K = H / HQ D / INNER, rounded up to a power of two. TIMES: each program stamps each phase's start (after
    # the barrier before it), the end of its prologue (prefetch, rows' RMS) and the end of its tiles into times
    # (_stamp; depth_pass_clock.py reads them).
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    dtype = x_ptr.dtype.element_ty
    NQKV: tl.constexpr = (HQ + 2 * HKV) * D
    HO: tl.constexpr = HQ * D
    rows = tl.arange(0, BLOCK_M)
    row_ok = rows[:, None] < R
    ones = tl.full((BLOCK_M,), 1.0, tl.float32)
    for layer in range(first, last):
        src = tl.where(layer == 0, x_ptr, out_ptr)  # the residual stream: the input until layer 0 writes out
        syncs = (layer - first) * _PHASES
        if (phases & 1) != 0:  # RMSNorm + q|k|v
            if TIMES:
                _stamp(times_ptr, pid, layer, 0, 0, pid, LAYERS)
            if PREFETCH:
                prefetch_tiles(o_w + layer * (H * HO), H // BN_H, HO, BN_H, LINE, LINES_HO, pid, nprog)
            rstd = _rows_rstd(src, R, H, eps, BLOCK_M, BK)
            if TIMES:
                _stamp(times_ptr, pid, layer, 0, 1, (tl.reduce(rstd, 0, SUM) > 0).to(tl.int32), LAYERS)
            for t in range(pid, NQKV // BN_QKV, nprog):
                cols = t * BN_QKV + tl.arange(0, BN_QKV)
                acc = _tile(src, R, H, rstd, in_w + layer * H, qkv_w + layer * (NQKV * H), cols, True, dtype,
                            BLOCK_M, BN_QKV, BK, DOT_DTYPE, PRECISION)
                tl.store(qkv_ptr + rows[:, None] * NQKV + cols[None, :], acc.to(dtype), mask=row_ok)
            if TIMES:
                _stamp(times_ptr, pid, layer, 0, 2, pid, LAYERS)
        if SYNC:
            _grid_sync(bar_ptr, (syncs + 1) * nprog)
        if (phases & 2) != 0:  # q/k-norm + RoPE + KV write + attention, one (token, KV head) a unit
            if TIMES:
                _stamp(times_ptr, pid, layer, 1, 0, pid, LAYERS)
            if PREFETCH:
                gu = gu_w + layer * (2 * INNER * H)
                prefetch_tiles(gu, INNER // BN_I, H, BN_I, LINE, LINES_H, pid, nprog)
                prefetch_tiles(gu + INNER * H, INNER // BN_I, H, BN_I, LINE, LINES_H, pid, nprog)
            if TIMES:
                _stamp(times_ptr, pid, layer, 1, 1, pid, LAYERS)
            for u in range(pid, R * HKV, nprog):
                t = u // HKV
                j = u % HKV
                slot = tl.load(slots_ptr + t)
                head = kv_ptr + layer * st_l + slot * st_s + j * st_h
                _attend(qkv_ptr + t * NQKV, o_ptr + t * HO, qn_w + layer * D, kn_w + layer * D, cos_ptr, sin_ptr,
                        tl.load(pos_ptr + t), head, head + st_kv, st_p, j, eps, qk_scale, HQ, HKV, D, BLOCK_G,
                        BLOCK_P, dtype)
            if TIMES:
                _stamp(times_ptr, pid, layer, 1, 2, pid, LAYERS)
        if SYNC:
            _grid_sync(bar_ptr, (syncs + 2) * nprog)
        if (phases & 4) != 0:  # o + residual
            if TIMES:
                _stamp(times_ptr, pid, layer, 2, 0, pid, LAYERS)
            if PREFETCH:
                prefetch_tiles(down_w + layer * (H * INNER), H // BN_H, INNER, BN_H, LINE, LINES_I, pid, nprog)
            if TIMES:
                _stamp(times_ptr, pid, layer, 2, 1, pid, LAYERS)
            for t in range(pid, H // BN_H, nprog):
                cols = t * BN_H + tl.arange(0, BN_H)
                y = _tile(o_ptr, R, HO, ones, in_w, o_w + layer * (H * HO), cols, False, dtype, BLOCK_M, BN_H, BK,
                          DOT_DTYPE, PRECISION).to(dtype).to(tl.float32)
                at = rows[:, None] * H + cols[None, :]
                res = tl.load(src + at, mask=row_ok, other=0.0, cache_modifier=".cg").to(tl.float32)
                tl.store(out_ptr + at, (res + y).to(dtype), mask=row_ok)
            if TIMES:
                _stamp(times_ptr, pid, layer, 2, 2, pid, LAYERS)
        if SYNC:
            _grid_sync(bar_ptr, (syncs + 3) * nprog)
        if (phases & 8) != 0:  # RMSNorm + gate|up + SwiGLU
            if TIMES:
                _stamp(times_ptr, pid, layer, 3, 0, pid, LAYERS)
            if PREFETCH:
                prefetch_tiles(qkv_w + ((layer + 1) % LAYERS) * (NQKV * H), NQKV // BN_QKV, H, BN_QKV, LINE,
                                LINES_H, pid, nprog)
            rstd = _rows_rstd(out_ptr, R, H, eps, BLOCK_M, BK)
            if TIMES:
                _stamp(times_ptr, pid, layer, 3, 1, (tl.reduce(rstd, 0, SUM) > 0).to(tl.int32), LAYERS)
            for t in range(pid, INNER // BN_I, nprog):
                cols = t * BN_I + tl.arange(0, BN_I)
                w = gu_w + layer * (2 * INNER * H)
                gate = _tile(out_ptr, R, H, rstd, post_w + layer * H, w, cols, True, dtype, BLOCK_M, BN_I, BK,
                             DOT_DTYPE, PRECISION).to(dtype).to(tl.float32)
                up = _tile(out_ptr, R, H, rstd, post_w + layer * H, w + INNER * H, cols, True, dtype, BLOCK_M, BN_I,
                           BK, DOT_DTYPE, PRECISION).to(dtype).to(tl.float32)
                silu = (gate / (1.0 + tl.exp(-gate))).to(dtype).to(tl.float32)
                tl.store(act_ptr + rows[:, None] * INNER + cols[None, :], (silu * up).to(dtype), mask=row_ok)
            if TIMES:
                _stamp(times_ptr, pid, layer, 3, 2, pid, LAYERS)
        if SYNC:
            _grid_sync(bar_ptr, (syncs + 4) * nprog)
        if (phases & 16) != 0:  # down + residual
            if TIMES:
                _stamp(times_ptr, pid, layer, 4, 0, pid, LAYERS)
                _stamp(times_ptr, pid, layer, 4, 1, pid, LAYERS)
            for t in range(pid, H // BN_H, nprog):
                cols = t * BN_H + tl.arange(0, BN_H)
                y = _tile(act_ptr, R, INNER, ones, in_w, down_w + layer * (H * INNER), cols, False, dtype, BLOCK_M,
                          BN_H, BK, DOT_DTYPE, PRECISION).to(dtype).to(tl.float32)
                at = rows[:, None] * H + cols[None, :]
                res = tl.load(out_ptr + at, mask=row_ok, other=0.0, cache_modifier=".cg").to(tl.float32)
                tl.store(out_ptr + at, (res + y).to(dtype), mask=row_ok)
            if TIMES:
                _stamp(times_ptr, pid, layer, 4, 2, pid, LAYERS)
        if SYNC and layer + 1 < last:
            _grid_sync(bar_ptr, (syncs + 5) * nprog)
    if SYNC:  # leave; the last CTA out hands the counter back at zero for the next launch
        total = ((last - first) * _PHASES) * nprog
        tl.atomic_add(bar_ptr, 1, sem="relaxed", scope="gpu")
        tl.atomic_cas(bar_ptr, total, 0, sem="relaxed", scope="gpu")


# The interpreter's bf16 dots are wrong (utils.interpreted): interpreted, they take the values upcast to fp32.
_DOT_UPCAST = interpreted(_depth_pass_kernel)


def barrier(device: torch.device) -> torch.Tensor:
    """The device's barrier counter (int32, zero between launches), made on first use: callers that capture a
    graph call this before capturing."""
    if device.type == "cuda" and device.index is None:  # "cuda" and the tensors' "cuda:0" share one counter
        device = torch.device("cuda", torch.cuda.current_device())
    if device not in _BARRIERS:
        _BARRIERS[device] = torch.zeros(1, dtype=torch.int32, device=device)
    return _BARRIERS[device]


def _shapes(x: torch.Tensor, weights: tuple[torch.Tensor, ...], store: torch.Tensor, heads: int,
            kv_heads: int) -> tuple[int, int, int, int]:
    in_w, qkv_w, qn, kn, o_w, post_w, gu_w, down_w = weights
    layers, h = in_w.shape
    d = qn.shape[1]
    inner = down_w.shape[2]
    nqkv = (heads + 2 * kv_heads) * d
    assert x.dim() == 2 and x.shape[1] == h and x.is_contiguous() and x.shape[0] <= MAX_ROWS, x.shape
    assert qkv_w.shape == (layers, nqkv, h) and o_w.shape == (layers, h, heads * d), (qkv_w.shape, o_w.shape)
    assert gu_w.shape == (layers, 2 * inner, h) and down_w.shape == (layers, h, inner), (gu_w.shape, down_w.shape)
    assert kn.shape == qn.shape == (layers, d) and post_w.shape == in_w.shape, (kn.shape, post_w.shape)
    assert all(w.is_contiguous() and w.dtype == x.dtype for w in weights), "weights: contiguous, x's dtype"
    assert store.dim() == 6 and store.shape[:2] == (layers, 2) and store.shape[3:] == (kv_heads, store.shape[4], d)
    assert store.stride(5) == 1 and store.dtype == x.dtype and heads % kv_heads == 0 and d & (d - 1) == 0
    return layers, h, inner, d


def _lines(element_size: int, h: int, head_out: int, inner: int) -> dict[str, int]:
    """The prefetch's constants: LINE, weight elements a 128-byte line (at most the narrowest row, so no address
    falls before a tile), and LINES_H / LINES_HO / LINES_I, lines a weight row of K = h / head_out / inner, rounded
    up to a power of two for tl.arange."""
    line = min(128 // element_size, h, head_out, inner)
    def lines(k: int) -> int:
        return triton.next_power_of_2(-(-k // line))
    return dict(LINE=line, LINES_H=lines(h), LINES_HO=lines(head_out), LINES_I=lines(inner))


def tiles(h: int, inner: int, nqkv: int, head_out: int) -> tuple[int, int, int, int]:
    """(BN_QKV, BN_H, BN_I, BK): 32 columns a tile where the phase has >= 64 of them (1.7B: q|k|v 128 tiles,
    gate|up 96), else 16 (o and down: 64); K tiles of 128 (or the narrowest K)."""
    def bn(n: int) -> int:
        return 32 if n >= 64 * 32 else 16
    bk = min(128, h, inner, head_out)
    assert all(n % bn(n) == 0 for n in (h, inner, nqkv)) and all(k % bk == 0 for k in (h, inner, head_out))
    return bn(nqkv), bn(h), bn(inner), bk


def depth_pass(x: torch.Tensor, weights: tuple[torch.Tensor, ...], store: torch.Tensor, slots: torch.Tensor,
               positions: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, heads: int, kv_heads: int, eps: float,
               one_phase: bool | None = None, prefetch: bool | None = None,
               times: torch.Tensor | None = None) -> torch.Tensor:
    """x [R, H] (R <= 16: each row one token, the only new one of store row slots[r], at positions[r]); weights
    the stack's layers stacked [L, ...] (in_norm, q|k|v, q_norm, k_norm, o, post_norm, gate|up, down: FusedStack's
    order); store [L, 2 (k, v), S, kv_heads, P, D]; cos/sin [P, D] -> the residual stream after the last layer
    [R, H] (not normalized). Keys and values are written into the store. one_phase: one launch per phase (default
    where the kernel is interpreted), else one launch for the pass. prefetch: each phase sends the next one's
    weights to L2 (default where the kernel is compiled; the interpreter has no inline PTX). Only a hint: the
    result is the same either way. times: int64 [programs(...), L, 5, 3, 2], filled with each program's clock
    stamps (the kernel's TIMES; one launch, compiled, only; depth_pass_clock.py reads them)."""
    layers, h, inner, d = _shapes(x, weights, store, heads, kv_heads)
    r = x.shape[0]
    one_phase = _DOT_UPCAST if one_phase is None else one_phase
    assert one_phase or not _DOT_UPCAST, "the interpreter runs programs one by one: no grid barrier"
    assert times is None or not one_phase, "clock stamps: one launch only"
    prefetch = not _DOT_UPCAST if prefetch is None else prefetch
    assert not (prefetch and _DOT_UPCAST), "the interpreter runs no inline PTX: no prefetch"
    out = torch.empty_like(x)
    if r == 0:
        return out
    nqkv = (heads + 2 * kv_heads) * d
    qkv_ws = torch.empty((r, nqkv), dtype=x.dtype, device=x.device)
    o_ws = torch.empty((r, heads * d), dtype=x.dtype, device=x.device)
    act_ws = torch.empty((r, inner), dtype=x.dtype, device=x.device)
    bn_qkv, bn_h, bn_i, bk = tiles(h, inner, nqkv, heads * d)
    units = phase_units(r, h, inner, d, heads, kv_heads)
    f32_dots = x.dtype == torch.float32 or _DOT_UPCAST
    bar = barrier(x.device)
    args = (x, out, qkv_ws, o_ws, act_ws, *weights, cos, sin, positions, slots, store, bar,
            *(store.stride(i) for i in range(5)), r, eps, math.log2(math.e) / math.sqrt(d))
    consts = dict(H=h, INNER=inner, HQ=heads, HKV=kv_heads, D=d, BLOCK_G=triton.next_power_of_2(heads // kv_heads),
                  BLOCK_P=triton.next_power_of_2(store.shape[4]), BLOCK_M=MAX_ROWS, BN_QKV=bn_qkv, BN_H=bn_h,
                  BN_I=bn_i, BK=bk, DOT_DTYPE=tl.float32 if f32_dots else tl.bfloat16,
                  PRECISION="ieee" if f32_dots else None, num_warps=4, LAYERS=layers, PREFETCH=prefetch,
                  **_lines(x.element_size(), h, heads * d, inner))
    if one_phase:
        for layer in range(layers):
            for p, n in enumerate(units):
                _depth_pass_kernel[(n,)](*args, layer, layer + 1, 1 << p, SYNC=False, **consts)
        return out
    grid = programs(x, weights, heads, kv_heads)
    timed = {} if times is None else dict(times_ptr=times, TIMES=True)
    assert times is None or (times.shape == (grid, layers, PHASES, 3, 2) and times.dtype == torch.int64), times
    _depth_pass_kernel[(grid,)](*args, 0, layers, (1 << PHASES) - 1, SYNC=True, **consts, **timed)
    return out


def programs(x: torch.Tensor, weights: tuple[torch.Tensor, ...], heads: int, kv_heads: int) -> int:
    """The one-launch pass's programs: one per SM, at most the widest phase's tiles (or units of attention)."""
    in_w, _, qn, *_, down_w = weights
    units = phase_units(x.shape[0], in_w.shape[1], down_w.shape[2], qn.shape[1], heads, kv_heads)
    return min(torch.cuda.get_device_properties(x.device).multi_processor_count, max(units))


def phase_units(r: int, h: int, inner: int, d: int, heads: int, kv_heads: int) -> list[int]:
    """Each phase's units of work at r rows: q|k|v's column tiles, attention's (token, KV head) pairs, o's,
    gate|up's and down's column tiles (programs pid < units take one)."""
    nqkv = (heads + 2 * kv_heads) * d
    bn_qkv, bn_h, bn_i, _ = tiles(h, inner, nqkv, heads * d)
    return [nqkv // bn_qkv, r * kv_heads, h // bn_h, inner // bn_i, h // bn_h]


def depth_pass_ref(x: torch.Tensor, weights: tuple[torch.Tensor, ...], store: torch.Tensor, slots: torch.Tensor,
                   positions: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, heads: int, kv_heads: int,
                   eps: float, one_phase: bool | None = None) -> torch.Tensor:
    """The same in plain PyTorch: the fused depth loop's layers (depth_fused.py) on its ops' references."""
    _shapes(x, weights, store, heads, kv_heads)
    for i, (in_w, qkv_w, qn, kn, o_w, post_w, gu_w, down_w) in enumerate(zip(*weights, strict=True)):
        qkv = cp_linear_ref(x, qkv_w, norm=in_w, eps=eps)
        o = cp_attend_ref(qkv, qn, kn, cos, sin, positions, store[i, 0], store[i, 1], slots, heads, kv_heads, eps)
        x = cp_linear_ref(o, o_w, residual=x)
        act = cp_linear_ref(x, gu_w, norm=post_w, eps=eps, swiglu=True)
        x = cp_linear_ref(act, down_w, residual=x)
    return x

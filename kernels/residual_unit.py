"""A whole codec residual unit in one kernel, for narrow channel counts: x + conv1x1(Snake(conv7_d(a))) with
a = Snake(x) already applied (the previous kernel's second output), state read in place as in causal_conv.py.

With C <= 256 (the decoder's last two blocks: 192 and 96 channels, which carry most of the samples) one tile
spans every channel, so the k7 conv's output h never leaves the chip: its SnakeBeta, the 1x1 conv over it, the
bias, the residual add and the next SnakeBeta all run in the epilogue. Two launches become one and two passes
over the largest activations (writing h, reading it back) go away. Same roundings as the two-kernel path.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import causal_conv as conv_kernels
from .causal_conv import TUNING_CACHE, Snake, _conv_acc, _quick_bench, _snake

MAX_CHANNELS = 256  # one tile spans all channels: wider units use two causal_conv launches


@triton.jit
def _residual_unit_kernel(
    a_ptr, state_ptr, slots_ptr, w1_ptr, b1_ptr, act2_a_ptr, act2_ib_ptr, w2_ptr, b2_ptr, res_ptr, out_ptr,
    out2_ptr, nxt_a_ptr, nxt_ib_ptr, M, L, C, HIST, DIL, st_ss, st_st, st_delta,
    STORE_MAIN: tl.constexpr, FAST_SIN: tl.constexpr, EVEN_K: tl.constexpr, LOADS: tl.constexpr, ALIGNED: tl.constexpr,
    PRECISION: tl.constexpr,
    UPCAST: tl.constexpr, BC: tl.constexpr, BN2: tl.constexpr, BK: tl.constexpr, BM: tl.constexpr,
):
    # a, res, out, out2 [M, C] contiguous; state [slots, HIST, C]; w1 [7*C, C], w2 [C, C] (GEMM layout: in x out).
    # grid: (cdiv(M, BM),). Columns >= C are zero all the way (masked weights and biases, SnakeBeta(0) = 0).
    dtype = a_ptr.dtype.element_ty
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rc = tl.arange(0, BC)
    row_ok = rm < M
    c_ok = rc < C
    acc = _conv_acc(a_ptr, state_ptr, slots_ptr, w1_ptr, rm, rc, M, L, C, C, HIST, DIL, st_ss, st_st, st_delta,
                    0, 7 * ((C + BK - 1) // BK), 7, True, EVEN_K, LOADS, ALIGNED, PRECISION, UPCAST, BK, BM, BC)
    h = (acc + tl.load(b1_ptr + rc, mask=c_ok, other=0.0).to(tl.float32)[None, :]).to(dtype).to(tl.float32)
    h = _snake(h, act2_a_ptr, act2_ib_ptr, rc, c_ok, FAST_SIN).to(dtype)
    if UPCAST:
        h = h.to(tl.float32)
    rm64 = rm.to(tl.int64)
    for n0 in tl.static_range(0, BC, BN2):  # the 1x1 conv, BN2 output channels at a time
        rn = n0 + tl.arange(0, BN2)
        n_ok = rn < C
        w2 = tl.load(w2_ptr + rc[:, None] * C + rn[None, :], mask=c_ok[:, None] & n_ok[None, :], other=0.0)
        if UPCAST:
            w2 = w2.to(tl.float32)
        y = tl.dot(h, w2, input_precision=PRECISION)
        y = (y + tl.load(b2_ptr + rn, mask=n_ok, other=0.0).to(tl.float32)[None, :]).to(dtype).to(tl.float32)
        offs = rm64[:, None] * C + rn[None, :]
        mask = row_ok[:, None] & n_ok[None, :]
        y = (tl.load(res_ptr + offs, mask=mask, other=0.0).to(tl.float32) + y).to(dtype).to(tl.float32)
        if STORE_MAIN:
            tl.store(out_ptr + offs, y.to(dtype), mask=mask)
        tl.store(out2_ptr + offs, _snake(y, nxt_a_ptr, nxt_ib_ptr, rn, n_ok, FAST_SIN).to(dtype), mask=mask)


def _prune(configs: list, named_args: dict, **kwargs: object) -> list:
    c = named_args["C"]
    return [cf for cf in configs if c % cf.kwargs["BK"] == 0]  # the tuned kernel runs with EVEN_K


# The accumulator spans all channels (up to 256 fp32 columns), so row tiles stay small.
_UNIT_CONFIGS = [triton.Config({"BM": bm, "BK": bk}, num_warps=w, num_stages=s)
                 for bm, bk, w, s in [(64, 32, 4, 4), (64, 64, 8, 3), (128, 32, 8, 3), (64, 32, 8, 4)]]
_residual_unit_tuned = triton.autotune(_UNIT_CONFIGS, key=["M", "C", "DIL", "LOADS", "ALIGNED"], prune_configs_by={
    "early_config_prune": _prune}, do_bench=_quick_bench, **TUNING_CACHE)(_residual_unit_kernel)


def residual_unit(a: torch.Tensor, w1: torch.Tensor, dilation: int, state: torch.Tensor, slots: torch.Tensor,
                  b1: torch.Tensor, act2: Snake, w2: torch.Tensor, b2: torch.Tensor, residual: torch.Tensor,
                  next_act: Snake, store_main: bool = True) -> tuple[torch.Tensor | None, torch.Tensor]:
    """a [B, L, C] (Snake(x)), w1 [7*C, C] (`conv_weight` of the k7 conv), state [slots, 6*d, C] with slots [B],
    w2 [C, C] (`conv_weight` of the 1x1 conv), residual x [B, L, C] -> (x + unit, next_act(x + unit)), both
    [B, L, C] in a's dtype; the first is None when not store_main. C <= MAX_CHANNELS."""
    b, length, c = a.shape
    hist = 6 * dilation
    assert c <= MAX_CHANNELS and w1.shape == (7 * c, c) and w2.shape == (c, c), (a.shape, w1.shape, w2.shape)
    assert a.is_contiguous() and residual.shape == a.shape and residual.is_contiguous()
    assert state.shape[1:] == (hist, c) and state.stride(2) == 1, (state.shape, hist)
    out = torch.empty_like(a) if store_main else None
    out2 = torch.empty_like(a)
    m = b * length
    if m == 0:
        return out, out2
    bk = conv_kernels.k_tile(c)
    args = (a, state, slots, w1, b1, act2[0], act2[1], w2, b2, residual, out if out is not None else out2, out2,
            next_act[0], next_act[1], m, length, c, hist, dilation, state.stride(0), state.stride(1),
            conv_kernels.state_delta(a, state))
    # One switch for both conv kernels (causal_conv.AUTOTUNE / LOADS / FAST_SIN, read at call time).
    flags = dict(STORE_MAIN=store_main, FAST_SIN=conv_kernels.FAST_SIN and a.dtype != torch.float32,
                 **conv_kernels.load_flags(a, state),
                 PRECISION="ieee" if a.dtype == torch.float32 else "tf32", UPCAST=a.device.type != "cuda",
                 BC=max(16, triton.next_power_of_2(c)), BN2=32)
    if a.device.type == "cuda" and conv_kernels.AUTOTUNE and a.dtype != torch.float32 and c % 32 == 0:
        _residual_unit_tuned[lambda meta: (triton.cdiv(m, meta["BM"]),)](*args, **flags, EVEN_K=True)
    else:
        bm = 64 if a.device.type == "cuda" else min(4096, max(16, triton.next_power_of_2(m)))
        _residual_unit_kernel[(triton.cdiv(m, bm),)](*args, **flags, EVEN_K=c % bk == 0, BK=bk, BM=bm,
                                                     num_warps=8 if a.device.type == "cuda" else 4)
    return out, out2

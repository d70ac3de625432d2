"""Streaming causal conv1d over time-major activations, as one implicit GEMM with the codec's tails fused in.

Activations are [B, L, C] with C contiguous (the layout a GEMM wants: no NCHW <-> NHWC transposes around
cuDNN). A stream's carried inputs (the last (taps-1)*dilation input rows) stay in its slot of a pool and are
read there in place: the kernel takes row t's tap j from the pool when t + j*d falls before the new inputs,
else from the new inputs, so nothing is concatenated or gathered first. `advance_state` then moves each slot's
window to the row's own end (rows of one step may have different numbers of real samples).

out[b, t, n] = sum_j sum_c xin(b, t + j*d - H, c) * w[j*Cin + c, n], with xin(b, s) = state[slot_b, H + s] for
s < 0 and x[b, s] otherwise (H = (taps-1)*d). The epilogue, in fp32 and rounded where the PyTorch ops round:
+ bias (rounded to the storage dtype, as a conv's output is), optional SnakeBeta of the result, optional
residual add (rounded), optional clamp; a second output can hold SnakeBeta(result) with other parameters (the
next conv's pre-activation, so the next conv's input needs no pass of its own).

A causal transposed conv with kernel 2s and stride s is the same kernel: taps (x[i-1], x[i]), H = 1, and the
s output samples of input frame i as N = s*Cout columns (`convt_weight`): [B, L, s*Cout] is [B, L*s, Cout].
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from . import conv_tma
from .utils import TUNING_CACHE, conv_epilogue, fast_sin_squared, interpreted, quick_bench

# Autotuned per (M, N, Cin, taps) on CUDA: the codec's convs range from N = 1 (the last conv) to 6144 columns
# (block 1's transposed conv) and M from a few hundred rows to millions. Few configs: each is compiled per
# flag combination, and a start-up's compiles are the user's wait.
_CONFIGS = [
    triton.Config({"BM": bm, "BN": bn, "BK": bk}, num_warps=w, num_stages=s)
    for bm, bn, bk, w, s in [(128, 64, 32, 4, 5), (128, 64, 64, 4, 4), (64, 128, 64, 4, 4), (64, 64, 32, 4, 5),
                             (128, 128, 64, 8, 3), (128, 32, 32, 4, 4), (128, 16, 32, 4, 4)]
]


@dataclass(frozen=True, slots=True)
class ConvOptions:
    """How causal_conv launches; the defaults are the measured ones (docs/codec.md has the H200 numbers).
    autotune: tune the tile per (M, N, Cin, taps) for 16-bit inputs on CUDA (off: one fixed tile; fp32 always
    runs a fixed tile). fast_sin: SnakeBeta's sin in 16-bit epilogues as a short polynomial instead of
    libdevice's sinf (3.89 -> 3.18 ms per 128 x 1 step). tma: kernels/conv_tma.py where it applies (off: the
    pointer kernel only); tma_min_length: the shortest batch rows with history that take it (512: rows of 160
    were 2x slower through TMA, rows of 640 and 1920 12 % and 20 % faster)."""

    autotune: bool = True
    fast_sin: bool = True
    tma: bool = True
    tma_min_length: int = 512


def _prune(configs: list, named_args: dict, **kwargs) -> list:
    """Drop tiles far wider than N or taller than M (masked work); keep at least one."""
    n, m, cin = named_args["N"], named_args["M"], named_args["CIN"]
    valid = [c for c in configs if cin % c.kwargs["BK"] == 0]  # the tuned kernel runs with EVEN_K
    kept = [c for c in valid if c.kwargs["BN"] <= max(32, 2 * n) and c.kwargs["BM"] <= max(64, m)]
    return kept or valid


@triton.jit
def _sin_squared_kernel(z_ptr, out_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + i, fast_sin_squared(tl.load(z_ptr + i, mask=i < n, other=0.0)), mask=i < n)


def sin_squared(z: torch.Tensor) -> torch.Tensor:
    """The epilogues' fast sin(z)**2 over a float32 tensor (to test it against torch.sin)."""
    z = z.contiguous()
    out = torch.empty_like(z)
    _sin_squared_kernel[(triton.cdiv(z.numel(), 1024),)](z, out, z.numel(), BLOCK=1024)
    return out


def sin_squared_ref(z: torch.Tensor) -> torch.Tensor:
    """The same with torch.sin, in float64 (the fast one's error is below fp32's step for |z| <= 100)."""
    return torch.sin(z.double()) ** 2


@triton.jit
def _conv_acc(x_ptr, state_ptr, slots_ptr, w_ptr, rm, rn, M, L, CIN, N, HIST, DIL, st_ss, st_st,
              TAPS: tl.constexpr, HAS_STATE: tl.constexpr, EVEN_K: tl.constexpr, PRECISION: tl.constexpr,
              UPCAST: tl.constexpr, BK: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    """The implicit GEMM: acc [BM, BN] fp32 for output rows rm and columns rn (see _causal_conv_kernel), over
    every K step (one tap's BK input channels)."""
    rk = tl.arange(0, BK)
    row_ok = rm < M
    col_ok = rn < N
    t = rm % L
    x_rows = x_ptr + rm.to(tl.int64) * CIN
    if HAS_STATE:
        slot = tl.load(slots_ptr + rm // L, mask=row_ok, other=0).to(tl.int64)
        state_rows = state_ptr + slot * st_ss + (HIST + t).to(tl.int64) * st_st
    kch = (CIN + BK - 1) // BK
    acc = tl.full((BM, BN), 0.0, tl.float32)  # core ops only: see tests' triton_mode
    for kk in range(0, TAPS * kch):
        j = kk // kch
        c = (kk - j * kch) * BK + rk
        shift = j * DIL - HIST
        # Row t's tap j: from the slot's history where t + shift < 0, else from the new inputs, through one
        # per-row choice of pointer. (Two masked loads, and int64 offsets declared aligned so that the compiler
        # stages the tile, were measured on the H200: slower, and the same speed; docs/codec.md.)
        if HAS_STATE:
            rows = tl.where(t + shift < 0, state_rows + shift * st_st, x_rows + shift * CIN)
        else:
            rows = x_rows + shift * CIN
        w_ptrs = w_ptr + (j * CIN + c).to(tl.int64)[:, None] * N + rn[None, :]
        if EVEN_K:
            a = tl.load(rows[:, None] + c[None, :], mask=row_ok[:, None], other=0.0)
            w = tl.load(w_ptrs, mask=col_ok[None, :], other=0.0)
        else:
            k_ok = c < CIN
            a = tl.load(rows[:, None] + c[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0.0)
            w = tl.load(w_ptrs, mask=k_ok[:, None] & col_ok[None, :], other=0.0)
        if UPCAST:  # Triton's CPU interpreter gets bf16 dots wrong (3.9): same products in fp32
            a, w = a.to(tl.float32), w.to(tl.float32)
        acc = tl.dot(a, w, acc, input_precision=PRECISION)
    return acc


@triton.jit
def _causal_conv_kernel(
    x_ptr, state_ptr, slots_ptr, w_ptr, bias_ptr, res_ptr, out_ptr, out2_ptr, a1_ptr, ib1_ptr, a2_ptr, ib2_ptr,
    M, L, CIN, N, HIST, DIL, st_ss, st_st, SNAKE_CH,
    TAPS: tl.constexpr, HAS_STATE: tl.constexpr, HAS_BIAS: tl.constexpr, SNAKE_MAIN: tl.constexpr,
    HAS_RES: tl.constexpr, CLAMP: tl.constexpr, STORE_MAIN: tl.constexpr, HAS_OUT2: tl.constexpr,
    FAST_SIN: tl.constexpr, EVEN_K: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr, BK: tl.constexpr,
    BM: tl.constexpr, BN: tl.constexpr,
):
    # x [M = B*L, CIN] contiguous; state [slots, HIST, CIN] (strides st_ss, st_st, 1); w [TAPS*CIN, N]
    # contiguous; res/out/out2 [M, N] contiguous; SnakeBeta parameters per column j % SNAKE_CH.
    # grid: (cdiv(M, BM), cdiv(N, BN)).
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = _conv_acc(x_ptr, state_ptr, slots_ptr, w_ptr, rm, rn, M, L, CIN, N, HIST, DIL, st_ss, st_st,
                    TAPS, HAS_STATE, EVEN_K, PRECISION, UPCAST, BK, BM, BN)
    conv_epilogue(acc, rm, rn, M, N, bias_ptr, res_ptr, out_ptr, out2_ptr, a1_ptr, ib1_ptr, a2_ptr, ib2_ptr, SNAKE_CH,
                  x_ptr.dtype.element_ty, HAS_BIAS, SNAKE_MAIN, HAS_RES, CLAMP, STORE_MAIN, HAS_OUT2, FAST_SIN)


def k_tile(cin: int) -> int:
    """The K step of the fixed-tile launches: the widest of 64, 32, 16 that divides Cin (else 16, masked)."""
    return next((k for k in (64, 32, 16) if cin % k == 0), 16)


_causal_conv_tuned = triton.autotune(_CONFIGS, key=["M", "N", "CIN", "TAPS", "HAS_STATE"],
                                     prune_configs_by={"early_config_prune": _prune},
                                     do_bench=quick_bench, **TUNING_CACHE)(_causal_conv_kernel)

# Triton's CPU interpreter (TRITON_INTERPRET=1 when this module was imported) runs the kernels on CPU tensors too.
INTERPRETED = interpreted(_causal_conv_kernel)


def runs_on(device: torch.device) -> bool:
    """Whether these kernels can run on tensors of `device` in this process."""
    return device.type == "cuda" or INTERPRETED


Snake = tuple[torch.Tensor, torch.Tensor]  # (exp(alpha), 1 / (exp(beta) + 1e-9)), fp32 [channels]


def causal_conv(x: torch.Tensor, w: torch.Tensor, taps: int, dilation: int = 1, *, state: torch.Tensor | None = None,
                slots: torch.Tensor | None = None, bias: torch.Tensor | None = None, snake_main: Snake | None = None,
                residual: torch.Tensor | None = None, clamp: bool = False, out_dtype: torch.dtype | None = None,
                snake_out2: Snake | None = None, store_main: bool = True, options: ConvOptions = ConvOptions(),
                ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """x [B, L, Cin] contiguous new inputs; w [taps*Cin, N] (`conv_weight` / `convt_weight`); state [slots,
    (taps-1)*dilation, Cin] pool view (last dim contiguous) with slots [B] long, or None for taps == 1.

    Returns (out [B, L, N] in out_dtype (default x's), out2 [B, L, N] in x's dtype or None); see the module
    docstring for the epilogue. Without state, taps must be 1 (nothing to carry). options: which kernel and tile
    (the results are the same up to summation order and, in 16-bit, fast_sin's last bit).
    """
    b, length, cin = x.shape
    n = w.shape[1]
    hist = (taps - 1) * dilation
    assert x.is_contiguous() and w.is_contiguous() and w.shape[0] == taps * cin, (x.shape, w.shape, taps)
    tiling = _tma_tiling(x, w, state, taps, options.tma_min_length) if options.tma else None
    if state is None:
        assert hist == 0, "a conv with more than one tap needs its carried inputs"
        state_arg, slots_arg, st_ss, st_st = x, x, 0, 0
    else:
        assert slots is not None and state.shape[1:] == (hist, cin) and state.stride(2) == 1, (state.shape, hist)
        state_arg, slots_arg, st_ss, st_st = state, slots, state.stride(0), state.stride(1)
    m = b * length
    out = torch.empty(b, length, n, dtype=out_dtype or x.dtype, device=x.device) if store_main else None
    out2 = torch.empty(b, length, n, dtype=x.dtype, device=x.device) if snake_out2 is not None else None
    if residual is not None:
        assert residual.shape == (b, length, n) and residual.is_contiguous(), residual.shape
    if m == 0:
        return out, out2
    bk = k_tile(cin)
    dummy = x
    a1, ib1 = snake_main if snake_main is not None else (dummy, dummy)
    # SnakeBeta's channel of column j: j % channels (a transposed conv's N = s*Cout columns repeat its channels)
    snake_ch = next((sn[0].shape[0] for sn in (snake_main, snake_out2) if sn is not None), n)
    assert n % snake_ch == 0, (n, snake_ch)
    a2, ib2 = snake_out2 if snake_out2 is not None else (dummy, dummy)
    args = (x, state_arg, slots_arg, w, dummy if bias is None else bias, dummy if residual is None else residual,
            dummy if out is None else out, dummy if out2 is None else out2, a1, ib1, a2, ib2,
            m, length, cin, n, hist, dilation, st_ss, st_st, snake_ch)
    flags = dict(TAPS=taps, HAS_STATE=state is not None, HAS_BIAS=bias is not None,
                 SNAKE_MAIN=snake_main is not None, HAS_RES=residual is not None, CLAMP=clamp,
                 STORE_MAIN=store_main, HAS_OUT2=snake_out2 is not None,
                 FAST_SIN=options.fast_sin and x.dtype != torch.float32,
                 PRECISION="ieee" if x.dtype == torch.float32 else "tf32", UPCAST=x.device.type != "cuda")
    if tiling is not None:
        conv_tma.conv_tma(args, flags, *tiling, autotune=x.device.type == "cuda" and options.autotune)
    # Tuned: 16-bit inputs (fp32 runs for exactness, not speed) with Cin a multiple of every tuned BK's minimum.
    elif x.device.type == "cuda" and options.autotune and x.dtype != torch.float32 and cin % 32 == 0:
        def grid(meta: dict) -> tuple[int, int]:
            return triton.cdiv(m, meta["BM"]), triton.cdiv(n, meta["BN"])
        _causal_conv_tuned[grid](*args, **flags, EVEN_K=True)
    elif x.device.type == "cuda":  # one fixed tile: no start-up tuning (tests, exactness runs)
        bn = 64 if n <= 64 else 128
        _causal_conv_kernel[(triton.cdiv(m, 128), triton.cdiv(n, bn))](
            *args, **flags, EVEN_K=cin % bk == 0, BK=bk, BM=128, BN=bn, num_warps=4 if bn == 64 else 8,
            num_stages=3)
    else:  # the CPU interpreter: large fixed tiles (numpy is vectorised within a program, slow across them)
        bm, bn = min(8192, max(16, triton.next_power_of_2(m))), min(64, max(16, triton.next_power_of_2(n)))
        _causal_conv_kernel[(triton.cdiv(m, bm), triton.cdiv(n, bn))](*args, **flags, EVEN_K=cin % bk == 0, BK=bk,
                                                                       BM=bm, BN=bn)
    return out, out2


def _tma_tiling(x: torch.Tensor, w: torch.Tensor, state: torch.Tensor | None, taps: int, min_length: int,
                ) -> tuple[int, int] | None:
    """(batch, length) of conv_tma's row tiles, or None where the pointer kernel runs. conv_tma tiles each batch
    row on its own (so that its zero fill ends the history and the row): a one-tap conv without history is one
    long row; a conv with history needs rows of at least min_length (and a 64-row tile)."""
    b, length, _ = x.shape
    if not (conv_tma.runs_on(x.device) and conv_tma.usable(x, w, state)):
        return None
    if state is None and taps == 1:
        return 1, b * length
    return (b, length) if length >= max(64, min_length) else None


@triton.jit
def _advance_state_kernel(x_ptr, state_ptr, slots_ptr, n_ptr, L, C, HIST, RATE, st_ss, st_st,
                          HP: tl.constexpr, BC: tl.constexpr):
    # Slot window <- the last HIST rows of [slot window | x[b, :n_b*RATE]]. grid: (B, cdiv(C, BC)).
    b = tl.program_id(0)
    c = tl.program_id(1) * BC + tl.arange(0, BC)
    h = tl.arange(0, HP)
    slot = tl.load(slots_ptr + b).to(tl.int64)
    src = tl.load(n_ptr + b) * RATE - HIST + h  # < 0: still in the window
    mask = (h < HIST)[:, None] & (c < C)[None, :]
    base = state_ptr + slot * st_ss
    from_state = base + (HIST + src).to(tl.int64)[:, None] * st_st + c[None, :]
    from_x = x_ptr + (b * L + src).to(tl.int64)[:, None] * C + c[None, :]
    v = tl.load(tl.where((src < 0)[:, None], from_state, from_x), mask=mask)
    tl.debug_barrier()  # every read of the old window lands before any write to it
    tl.store(base + h.to(tl.int64)[:, None] * st_st + c[None, :], v, mask=mask)


def advance_state(x: torch.Tensor, state: torch.Tensor, slots: torch.Tensor, num_frames: torch.Tensor,
                  rate: int) -> None:
    """state[slots[b]] <- last H rows of [state[slots[b]] | x[b, :num_frames[b] * rate]] (in place).

    x [B, L, C] contiguous (the conv's new inputs, right-padded); state [slots, H, C] pool view. Rows with 0 new
    frames keep their window; padding rows sharing the sink slot with 0 frames rewrite it unchanged.
    """
    b, length, c = x.shape
    hist = state.shape[1]
    assert x.is_contiguous() and state.shape[2] == c and state.stride(2) == 1, (x.shape, state.shape)
    if b == 0 or hist == 0:
        return
    bc = min(triton.next_power_of_2(c), max(16, 4096 // triton.next_power_of_2(hist)))
    _advance_state_kernel[(b, triton.cdiv(c, bc))](
        x, state, slots, num_frames, length, c, hist, rate, state.stride(0), state.stride(1),
        HP=max(2, triton.next_power_of_2(hist)), BC=bc, num_warps=4)


# -- weights and references --------------------------------------------------------------------------------------

def conv_weight(w: torch.Tensor) -> torch.Tensor:
    """Conv1d weight [Cout, Cin, taps] -> [taps*Cin, Cout] (row j*Cin + c: tap j, input channel c)."""
    return w.permute(2, 1, 0).reshape(-1, w.shape[0]).contiguous()


def convt_weight(w: torch.Tensor, stride: int) -> torch.Tensor:
    """Causal ConvTranspose1d weight [Cin, Cout, 2s] -> [2*Cin, s*Cout]: tap 0 reads x[i-1] (kernel positions
    s..2s-1), tap 1 reads x[i] (0..s-1); column r*Cout + o is output sample i*s + r, channel o."""
    cin, cout, k = w.shape
    assert k == 2 * stride, (k, stride)
    taps = [w[:, :, stride:], w[:, :, :stride]]
    return torch.cat([t.permute(0, 2, 1).reshape(cin, stride * cout) for t in taps]).contiguous()


def snake_ref(y: torch.Tensor, snake: Snake) -> torch.Tensor:
    """SnakeBeta over the last dim of y, its parameters repeated when y has more columns (transposed convs)."""
    reps = y.shape[-1] // snake[0].shape[0]
    a, ib = snake[0].repeat(reps), snake[1].repeat(reps)
    return y + ib * torch.sin(y * a).pow(2)


def causal_conv_ref(x: torch.Tensor, w: torch.Tensor, taps: int, dilation: int = 1, *,
                    state: torch.Tensor | None = None, slots: torch.Tensor | None = None,
                    bias: torch.Tensor | None = None, snake_main: Snake | None = None,
                    residual: torch.Tensor | None = None, clamp: bool = False, out_dtype: torch.dtype | None = None,
                    snake_out2: Snake | None = None, store_main: bool = True,
                    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """causal_conv in plain PyTorch: [carried | new] per row, F.conv1d in fp32, the same roundings."""
    cin = x.shape[2]
    dt = x.dtype
    full = x if state is None else torch.cat([state[slots], x], dim=1)  # [B, H + L, Cin]
    wk = w.float().view(taps, cin, -1).permute(2, 1, 0)  # [N, Cin, taps]
    y = torch.nn.functional.conv1d(full.float().transpose(1, 2), wk, dilation=dilation).transpose(1, 2)
    if bias is not None:
        y = y + bias.float()
    y = y.to(dt).float()
    if snake_main is not None:
        y = snake_ref(y, snake_main).to(dt).float()
    if residual is not None:
        y = (residual.float() + y).to(dt).float()
    if clamp:
        y = y.clamp(-1.0, 1.0)
    out = y.to(out_dtype or dt) if store_main else None
    out2 = snake_ref(y, snake_out2).to(dt) if snake_out2 is not None else None
    return out, out2


def advance_state_ref(x: torch.Tensor, state: torch.Tensor, slots: torch.Tensor, num_frames: torch.Tensor,
                      rate: int) -> None:
    hist = state.shape[1]
    for b in range(x.shape[0]):
        end = int(num_frames[b]) * rate
        full = torch.cat([state[slots[b]], x[b, :end]])
        state[slots[b]] = full[full.shape[0] - hist:]

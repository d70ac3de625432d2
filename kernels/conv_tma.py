"""causal_conv.py's streaming conv with its tiles fetched by Hopper's tensor memory accelerator (TMA).

Why: the pointer kernel spends its issue slots on addresses. Per K step each thread builds a 64-bit pointer per
element it loads (a per-row choice between history and new inputs), and the compiled loop on sm_90 has ~200
instructions for 4 wgmma; at 128 x 32 x 32 that is ~3x the tensor cores' time, which fits the measured 180-360
TFLOP/s. A TMA load is one instruction per tile, issued by one thread, and it zero-fills rows outside its tensor.

That zero fill makes history and batch boundaries free. A tile covers rows t0..t0+BM-1 of one batch row b, so
tap j reads x[b, t0 + j*d - H + i] through a [B, L, Cin] descriptor: rows before 0 or past L come back zero.
The rows before 0 are the history, read through a [slots, H, Cin] descriptor of the pool at
(slot_b, H + t0 + j*d - H + i), where rows at or past H come back zero. The two tiles are complementary, so
their sum is the input (adding exact zeros): one MMA per tap with that sum as its register operand, and only
tiles with t0 < H read the second one (two MMAs from shared memory instead, measured on the H200: 3.02 against
2.98 ms for the step at 128 x 1). Same arguments, epilogue and results as causal_conv (within summation order;
bit for bit where the K step matches).

Measured on the H200 (docs/codec.md): the 1x1 convs 15-35 % faster than the pointer kernel, the k7 convs over
rows of 1920 and 640 20 % and 12 %; rows of 160 2x slower (per-row tiles pad them), so causal_conv picks per
shape (ConvOptions.tma_min_length).

Needs: CUDA with compute capability >= 9, 16-bit inputs, Cin a multiple of 32, and 16-byte aligned rows and
bases (checked by `usable`; causal_conv falls back to its pointer kernel otherwise). Triton's interpreter runs it
too (tests).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .utils import TUNING_CACHE, conv_epilogue, interpreted, quick_bench

try:
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:  # Triton < 3.4: no host-side descriptors, so no TMA path
    TensorDescriptor = None


@triton.jit
def _conv_tma_kernel(
    x_desc, st_desc, w_desc, x_ptr, slots_ptr, bias_ptr, res_ptr, out_ptr, out2_ptr, a1_ptr, ib1_ptr, a2_ptr,
    ib2_ptr, M, L, CIN, N, HIST, DIL, SNAKE_CH,
    TAPS: tl.constexpr, HAS_STATE: tl.constexpr, HAS_BIAS: tl.constexpr, SNAKE_MAIN: tl.constexpr,
    HAS_RES: tl.constexpr, CLAMP: tl.constexpr, STORE_MAIN: tl.constexpr, HAS_OUT2: tl.constexpr,
    FAST_SIN: tl.constexpr, UPCAST: tl.constexpr, BK: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
):
    # x_desc [B, L, CIN] blocks [1, BM, BK]; st_desc [slots, HIST, CIN] blocks [1, BM, BK]; w_desc [TAPS*CIN, N]
    # blocks [BK, BN]. grid: (cdiv(N, BN), B * cdiv(L, BM)): the column tiles of one row tile run side by side
    # and share its activation rows in L2.
    tiles_t = (L + BM - 1) // BM
    b = tl.program_id(1) // tiles_t
    t0 = (tl.program_id(1) - b * tiles_t) * BM
    n0 = tl.program_id(0) * BN
    kch = CIN // BK
    acc = tl.full((BM, BN), 0.0, tl.float32)  # core ops only: see tests' triton_mode
    if HAS_STATE and t0 < HIST:  # the tile's early taps reach into the slot's history
        slot = tl.load(slots_ptr + b).to(tl.int32)
        for kk in range(TAPS * kch):
            j = kk // kch
            k0 = (kk - j * kch) * BK
            s = t0 + j * DIL - HIST
            w = w_desc.load([j * CIN + k0, n0])
            a = x_desc.load([b, s, k0]).reshape(BM, BK)
            h = st_desc.load([slot, HIST + s, k0]).reshape(BM, BK)
            if UPCAST:  # Triton's CPU interpreter gets bf16 dots wrong (3.9): same products in fp32
                a, h, w = a.to(tl.float32), h.to(tl.float32), w.to(tl.float32)
            acc = tl.dot(a + h, w, acc)  # one of each row's two values is zero: the sum is exact
    else:
        for kk in range(TAPS * kch):
            j = kk // kch
            k0 = (kk - j * kch) * BK
            w = w_desc.load([j * CIN + k0, n0])
            a = x_desc.load([b, t0 + j * DIL - HIST, k0]).reshape(BM, BK)
            if UPCAST:
                a, w = a.to(tl.float32), w.to(tl.float32)
            acc = tl.dot(a, w, acc)
    t = t0 + tl.arange(0, BM)
    rm = tl.where(t < L, b * L + t, M)  # rows past this batch row's end: masked out (row M)
    rn = n0 + tl.arange(0, BN)
    conv_epilogue(acc, rm, rn, M, N, bias_ptr, res_ptr, out_ptr, out2_ptr, a1_ptr, ib1_ptr, a2_ptr, ib2_ptr, SNAKE_CH,
                  x_ptr.dtype.element_ty, HAS_BIAS, SNAKE_MAIN, HAS_RES, CLAMP, STORE_MAIN, HAS_OUT2, FAST_SIN)


def _set_block_shapes(nargs: dict) -> None:
    """The descriptors' tiles follow the config being launched (an autotuner pre-hook)."""
    bm, bn, bk = nargs["BM"], nargs["BN"], nargs["BK"]
    nargs["x_desc"].block_shape = [1, bm, bk]
    nargs["st_desc"].block_shape = [1, bm, bk]
    nargs["w_desc"].block_shape = [bk, bn]


# (BM, BN, BK, warps, stages). Shared memory per stage: (2*BM*BK + BK*BN) * 2 B with history (two A tiles).
_CONFIGS = [
    triton.Config({"BM": bm, "BN": bn, "BK": bk}, num_warps=w, num_stages=s, pre_hook=_set_block_shapes)
    for bm, bn, bk, w, s in [(128, 128, 64, 8, 3), (128, 128, 64, 4, 3), (128, 64, 64, 4, 4), (64, 128, 64, 4, 4),
                             (128, 256, 64, 8, 3), (128, 128, 32, 4, 4), (128, 64, 32, 4, 4), (64, 64, 64, 4, 4)]
]


def _prune(configs: list, named_args: dict, **kwargs) -> list:
    """Tiles whose K step divides Cin, no far wider than N or taller than a batch row's L; keep at least one."""
    n, length, cin = named_args["N"], named_args["L"], named_args["CIN"]
    valid = [c for c in configs if cin % c.kwargs["BK"] == 0]
    kept = [c for c in valid if c.kwargs["BN"] <= max(64, 2 * n) and c.kwargs["BM"] <= max(64, length)]
    return kept or valid


_conv_tma_tuned = triton.autotune(_CONFIGS, key=["M", "L", "N", "CIN", "TAPS", "HAS_STATE"],
                                  prune_configs_by={"early_config_prune": _prune},
                                  do_bench=quick_bench, **TUNING_CACHE)(_conv_tma_kernel)


def runs_on(device: torch.device) -> bool:
    """CUDA, or the CPU where this module's kernel runs in Triton's interpreter (tests)."""
    return device.type == "cuda" or interpreted(_conv_tma_kernel)


def _aligned(t: torch.Tensor) -> bool:
    return t.data_ptr() % 16 == 0 and all(s * t.element_size() % 16 == 0 for s in t.stride()[:-1])


def usable(x: torch.Tensor, w: torch.Tensor, state: torch.Tensor | None) -> bool:
    """Whether conv_tma can run this conv: a TMA-capable device (or the interpreter), 16-bit inputs, Cin a multiple
    of 32, and every tensor's rows and base 16-byte aligned (a TMA descriptor's rule)."""
    if TensorDescriptor is None or x.dtype not in (torch.bfloat16, torch.float16) or x.shape[-1] % 32:
        return False
    if x.device.type == "cuda" and torch.cuda.get_device_capability(x.device)[0] < 9:
        return False
    return _aligned(x) and _aligned(w) and (state is None or _aligned(state))


def conv_tma(args: tuple, flags: dict, batch: int, length: int, autotune: bool) -> None:
    """Launch for causal_conv (its `args` and `flags`, pointer-kernel names) with the rows tiled as `batch` rows of
    `length` (a one-tap conv without history: one long row): see the module docstring."""
    (x, state, slots, w, bias, res, out, out2, a1, ib1, a2, ib2,
     m, _, cin, n, hist, dil, _st_ss, _st_st, snake_ch) = args
    has_state = flags["HAS_STATE"]
    x_desc = TensorDescriptor(x, [batch, length, cin], [length * cin, cin, 1], [1, 64, 32])
    st_desc = TensorDescriptor(state, list(state.shape), list(state.stride()), [1, 64, 32]) if has_state else x_desc
    w_desc = TensorDescriptor(w, [w.shape[0], n], [n, 1], [32, 64])
    kernel_args = (x_desc, st_desc, w_desc, x, slots, bias, res, out, out2, a1, ib1, a2, ib2,
                   m, length, cin, n, hist, dil, snake_ch)
    kernel_flags = {k: flags[k] for k in ("TAPS", "HAS_STATE", "HAS_BIAS", "SNAKE_MAIN", "HAS_RES", "CLAMP",
                                          "STORE_MAIN", "HAS_OUT2", "FAST_SIN", "UPCAST")}

    def grid(meta: dict) -> tuple[int, int]:
        return triton.cdiv(n, meta["BN"]), batch * triton.cdiv(length, meta["BM"])

    if autotune:
        _conv_tma_tuned[grid](*kernel_args, **kernel_flags)
        return
    # fixed tile (tests, the interpreter): as the pointer kernel's fixed tile
    tile = dict(BM=64, BN=64, BK=64 if cin % 64 == 0 else 32)
    _set_block_shapes({"x_desc": x_desc, "st_desc": st_desc, "w_desc": w_desc, **tile})
    _conv_tma_kernel[grid(tile)](*kernel_args, **kernel_flags, **tile, num_warps=4, num_stages=3)

"""Triton helpers that more than one kernel calls: reduction combine functions, the interpreter check, the warp count
of a row-wise kernel, the autotuner's settings, the depth loop's q/k-norm + RoPE (cp_attend.py and depth_pass.py),
one key block of an online softmax (slot_attention.py and prefill_attention.py), an L2 prefetch of row-major weight
tiles and a clock read (inline PTX, compiled kernels only: depth_pass.py's, for any kernel that knows which weights
it reads next or wants its phases timed), and the conv kernels' shared epilogue (SnakeBeta and its fast sine), so
that causal_conv.py and conv_tma.py both import it from here instead of from each other.

Kernels that must also run in Triton's CPU interpreter (the tests, without a GPU) use core ops only: tests switch
a kernel module to the interpreter by re-importing it, and this module with it (tests/triton_mode.py).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import triton
import triton.language as tl


@triton.jit
def add(a, b):
    return a + b


@triton.jit
def maximum(a, b):
    return tl.maximum(a, b)


@triton.jit
def minimum(a, b):
    return tl.minimum(a, b)


# Reductions go through tl.reduce with triton's own combine functions where they exist: the interpreter reduces
# with numpy only for those (recognized by identity) and runs any other combine element by element in Python,
# and tl.max / tl.sum fail there outright when triton itself was imported outside interpreter mode (as under the
# tests' kernel_module). Compiled, either combine is the same reduction.
SUM = getattr(tl.standard, "_sum_combine", None) or add
MAX = getattr(tl.standard, "_elementwise_max", None) or maximum
MIN = getattr(tl.standard, "_elementwise_min", None) or minimum


def interpreted(kernel: object) -> bool:
    """Whether `kernel` (a @triton.jit function) runs in Triton's CPU interpreter: TRITON_INTERPRET=1 when its
    module was imported. Interpreted kernels run on CPU tensors too. The interpreter multiplies bf16 dot operands
    as their raw uint16 bits (seen in triton 3.9), so interpreted kernels take bf16 values upcast to fp32 (exact)
    with an fp32 product, which is what a bf16 MMA computes too."""
    return not isinstance(kernel, triton.runtime.jit.JITFunction)


def row_warps(block: int) -> int:
    """Warps for a kernel with one row of `block` (a power of two) channels per program: ~256 channels per warp,
    4 warps for the codec's 1024 channels, 1 for the tests' small rows."""
    return max(1, min(8, block // 256))


# Tuned tiles go to Triton's cache directory (TRITON_CACHE_DIR) where the autotuner can keep them (Triton >= 3.4),
# so a restart reuses them instead of tuning again.
TUNING_CACHE = {"cache_results": True} if "cache_results" in inspect.signature(triton.autotune).parameters else {}


def quick_bench(fn: Callable[[], object], quantiles: list[float] | None = None, **kwargs: object) -> object:
    """Shorter than triton's default 25 + 100 ms per config: tuning runs once per shape at start-up."""
    return triton.testing.do_bench(fn, warmup=5, rep=20, quantiles=quantiles)


# -- programmatic dependent launch (Hopper; the engine option `pdl`) ---------------------------------------------
# A kernel launched with `launch_pdl` may start before the kernel ahead of it in the stream has finished: it does
# whatever needs no earlier result (gemv.py loads its weight tile), lets the next kernel start too
# (`gdc_launch_dependents`), then waits (`gdc_wait`) for the one ahead to finish and its writes to be visible.
# Every kernel taking a PDL flag calls both, before it reads anything another kernel writes; compiled only (the
# interpreter has neither: pdl_launch turns the flag off there). A launcher's `pdl` is False, True (release the next
# kernel, then wait: several kernels ahead may be loading at once) or "late" (wait, then release: one kernel ahead).

try:
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
except ImportError:  # Triton < 3.3: no grid dependency control; pdl_available says so
    gdc_launch_dependents = gdc_wait = None


@triton.jit
def wait_for_inputs(PDL: tl.constexpr):
    """PDL 1: let the next kernel start, then wait for the previous one's writes; 2: wait, then let the next one
    start; 0: nothing."""
    if PDL == 1:
        gdc_launch_dependents()
        gdc_wait()
    elif PDL == 2:
        gdc_wait()
        gdc_launch_dependents()


def pdl_available(device: object) -> bool:
    """Whether kernels on `device` (a torch.device) can be launched with PDL: CUDA on sm_90 or newer, with a Triton
    that has grid dependency control."""
    import torch

    dev = torch.device(device)
    return (gdc_wait is not None and dev.type == "cuda" and torch.cuda.is_available()
            and torch.cuda.get_device_capability(dev)[0] >= 9)


PdlMode = bool | str  # False, True or "late" (above)


def pdl_launch(kernel: object, pdl: PdlMode) -> tuple[int, dict[str, bool]]:
    """(the kernel's PDL constexpr: 0 off, 1 release then wait, 2 wait then release; the launch's extra keyword
    arguments) for a request `pdl`: off where `kernel` runs interpreted."""
    assert pdl in (False, True, "late"), pdl
    if not pdl or interpreted(kernel):
        return 0, {}
    return (2 if pdl == "late" else 1), {"launch_pdl": True}


# -- folded norms (qk_norm_rope.py, swiglu.py: fused_stack.py's `fold_norms`) ----------------------------------

@triton.jit
def row_rstd(row_ptr, width, eps, BLOCK: tl.constexpr):
    """1 / RMS (fp32) of one row of `width` values at row_ptr (BLOCK >= width, a power of two)."""
    c = tl.arange(0, BLOCK)
    r = tl.load(row_ptr + c, mask=c < width, other=0.0).to(tl.float32)
    return tl.rsqrt(tl.reduce(r * r, 0, SUM) / width + eps)


# -- the depth loop's attention (cp_attend.py, depth_pass.py) -------------------------------------------------

@triton.jit
def norm_rope(x, xp, w, wp, cos, sin, sign, eps, D: tl.constexpr, dtype: tl.constexpr):
    """q/k RMSNorm over head_dim, then rotate-half RoPE: x [G, D] fp32 and its rotate-half partner xp, w/wp the
    norm weight at d and at the partner's index -> [G, D] in dtype (roundings: kernels/cp_attend.py)."""
    r = tl.rsqrt(tl.reduce(x * x, 1, SUM) / D + eps)[:, None]
    xn = ((x * r).to(dtype).to(tl.float32) * w).to(dtype).to(tl.float32)
    xpn = ((xp * r).to(dtype).to(tl.float32) * wp).to(dtype).to(tl.float32)
    return ((xn * cos).to(dtype).to(tl.float32) + (sign * xpn * sin).to(dtype).to(tl.float32)).to(dtype)


# -- the conv kernels' epilogue (causal_conv.py, conv_tma.py) -----------------------------------------------------

# SnakeBeta's sin in 16-bit epilogues (ConvOptions.fast_sin): the codec evaluates ~340 M sines per 128-stream
# step, and sinf's range reduction (a slow path with a local-memory table, inlined per element) is ~3x the
# instructions of this polynomial. Its error (< 1e-7) is far below bf16's.
_INV_PI = tl.constexpr(0.3183098861837907)
_PI_HI = tl.constexpr(3.140625)  # 8 significant bits: n * _PI_HI is exact in fp32 for |n| < 2**16
_PI_LO = tl.constexpr(9.676535897932795e-4)  # pi - _PI_HI


@triton.jit
def softmax_block(q, k, v, visible, m, denom, acc, qk_scale, dtype: tl.constexpr, DOT_DTYPE: tl.constexpr,
                  PRECISION: tl.constexpr):
    """One key block of an online softmax (slot_attention.py, prefill_attention.py): q [R, D], k/v [N, D], visible
    [R, N] -> the running max m [R], denominator [R] and P.V sum acc [R, D], all fp32. Scores go through exp2
    (qk_scale has log2(e) in it); a hidden key scores -1e30, finite, so a row with none gives garbage, never NaN.
    The probabilities are rounded to the value dtype for the P.V dot, as flash attention does."""
    s = tl.dot(q, tl.trans(k.to(DOT_DTYPE)), input_precision=PRECISION) * qk_scale
    s = tl.where(visible, s, -1.0e30)
    m_new = tl.maximum(m, tl.reduce(s, 1, MAX))
    alpha = tl.exp2(m - m_new)
    p = tl.exp2(s - m_new[:, None])
    denom = denom * alpha + tl.reduce(p, 1, SUM)
    acc = acc * alpha[:, None] + tl.dot(p.to(dtype).to(DOT_DTYPE), v.to(DOT_DTYPE), input_precision=PRECISION)
    return m_new, denom, acc


@triton.jit
def fast_sin_squared(z):
    """sin(z)**2 in fp32 for 16-bit results: z - n*pi (Cody-Waite, two parts) in [-pi/2, pi/2], where sin's
    sign no longer matters, then sin's Taylor series to z**11 (error < 6e-8 there)."""
    n = tl.floor(z * _INV_PI + 0.5)
    r = z - n * _PI_HI
    r = r - n * _PI_LO
    r2 = r * r
    p = -2.505210838544172e-08 * r2 + 2.7557319223985893e-06
    p = p * r2 - 1.984126984126984e-04
    p = p * r2 + 8.333333333333333e-03
    p = p * r2 - 1.6666666666666666e-01
    s = r + r * r2 * p
    return s * s



@triton.jit
def snake(y, a_ptr, ib_ptr, cols, mask, FAST: tl.constexpr):
    a = tl.load(a_ptr + cols, mask=mask, other=0.0)
    ib = tl.load(ib_ptr + cols, mask=mask, other=0.0)
    z = y * a[None, :]
    if FAST:
        s2 = fast_sin_squared(z)
    else:
        s = tl.sin(z)
        s2 = s * s
    return y + ib[None, :] * s2



@triton.jit
def conv_epilogue(acc, rm, rn, M, N, bias_ptr, res_ptr, out_ptr, out2_ptr, a1_ptr, ib1_ptr, a2_ptr, ib2_ptr, SNAKE_CH,
              dtype: tl.constexpr, HAS_BIAS: tl.constexpr, SNAKE_MAIN: tl.constexpr, HAS_RES: tl.constexpr,
              CLAMP: tl.constexpr, STORE_MAIN: tl.constexpr, HAS_OUT2: tl.constexpr, FAST_SIN: tl.constexpr):
    """acc [BM, BN] fp32 (the conv's sum for rows rm, columns rn) -> the stored outputs (causal_conv.py's module
    docstring)."""
    row_ok = rm < M
    col_ok = rn < N
    y = acc
    if HAS_BIAS:
        y += tl.load(bias_ptr + rn, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    y = y.to(dtype).to(tl.float32)  # the conv's output, as stored
    if SNAKE_MAIN:
        y = snake(y, a1_ptr, ib1_ptr, rn % SNAKE_CH, col_ok, FAST_SIN).to(dtype).to(tl.float32)
    offs = rm.to(tl.int64)[:, None] * N + rn[None, :]
    mask = row_ok[:, None] & col_ok[None, :]
    if HAS_RES:
        y = (tl.load(res_ptr + offs, mask=mask, other=0.0).to(tl.float32) + y).to(dtype).to(tl.float32)
    if CLAMP:
        y = tl.minimum(tl.maximum(y, -1.0), 1.0)
    if STORE_MAIN:
        tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)
    if HAS_OUT2:
        tl.store(out2_ptr + offs, snake(y, a2_ptr, ib2_ptr, rn % SNAKE_CH, col_ok, FAST_SIN).to(dtype), mask=mask)


@triton.jit
def clocks(anchor):
    # (the GPU's global nanosecond clock %globaltimer, the SM's cycle counter %clock64), read once the program has
    # `anchor` (any int32 value: a result the reading must wait for)
    return tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;\n\tmov.u64 $1, %clock64;", "=l,=l,r", [anchor],
                                     dtype=(tl.int64, tl.int64), is_pure=False, pack=1)


@triton.jit
def prefetch_l2(addresses):
    # a hint with no result: the 128-byte line of each address is fetched into L2 (the zeros returned are dropped)
    tl.inline_asm_elementwise("prefetch.global.L2 [$1];\n\tmov.u32 $0, 0;", "=r,l", [addresses], dtype=tl.int32,
                              is_pure=False, pack=1)


@triton.jit
def prefetch_tiles(w_ptr, n_tiles, K: tl.constexpr, BN: tl.constexpr, LINE: tl.constexpr, LINES: tl.constexpr,
                   pid, nprog):
    # program pid's share (of nprog) of the tiles of a row-major w [n_tiles * BN, K] into L2, one address per line
    # of LINE elements (LINES: a power of two >= K / LINE; the extra addresses repeat the row's last line)
    r = tl.arange(0, BN)
    k = tl.minimum(tl.arange(0, LINES) * LINE, K - LINE)
    for t in range(pid, n_tiles, nprog):
        prefetch_l2(w_ptr + (t * BN + r)[:, None] * K + k[None, :])

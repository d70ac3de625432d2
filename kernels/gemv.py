"""y = x @ W^T (+ bias) for a few rows (M <= 16), or the same added into a residual in place (x_res += a @ W^T): the
projections of the depth loop and of one-stream steps, where cuBLAS runs a dependent chain of GEMVs at ~1.2-1.6 TB/s
(docs/benchmarks/h200-step-profile/chain). A GEMV of M rows is bound by reading W once, and in a chain of dependent
kernels by how fast each read ramps up, so each program loads its whole tile of W, [BLOCK_N, K], in one load: no K
loop, every byte it needs in flight at once (8,192 values a program, 32 a thread at 8 warps). Then it multiplies the
tile by each row of x in turn (fp32 FMAs and one reduction a row) and stores each row's BLOCK_N outputs. One row
takes `_gemv_kernel`; 2-16 rows take `_gemv_rows_kernel` where it fits (`fast`: 16 columns' whole rows, K <= 4,096):
tensor-core MMAs of the tile by x's rows padded to 16, so W is read once and no row's sum crosses warps by hand (the
one-row kernel's per-row reductions cross warps through shared memory: an 8-row step took 8.3 ms with it on an H100
against cuBLAS's 4.8). K is cut into MMA_PARTS_A_WARP parts a warp, one MMA chain each, summed in order: one tl.dot
of the whole tile gave every warp the whole K, a chain of 64 dependent MMAs. On an H100 the predictor's layer at 8
rows reads at 1.24 TB/s against cuBLAS's 0.94; the Talker's q|k|v and gate|up (K 2,048) read slower than cuBLAS
(small_gemm.TALKER_ROWS). By the kernel's own rule the columns alone give the programs; split-K (`split_above`, the
engine's `gemv_split`, 16,384 by default there) cuts K across programs too, each storing its fp32 sums for the last
of its columns to add in order: still one launch, and the same bits on every run.

`lanes` (the engine's `gemv_layout = lanes`) takes `_gemv_lanes_kernel` at 1-16 rows where it fits: the tile laid
out so that each warp holds whole rows of W across its 32 lanes, every row's sum a warp's own (shuffles, no shared
memory): the one-row kernel's tile spreads K over 4 warps, whose sums meet through shared memory.

With `pdl` (Hopper: programmatic dependent launch, kernels/utils.py: True or "late") the weight load comes before the
wait for the kernel ahead: in a chain of projections each one's weights stream in while the one before it computes.

Rounding is F.linear's: the fp32 sum (plus the bias, plus the residual, in fp32) rounded once to x's dtype, as
cuBLAS's addmm with beta = 1 rounds the residual add.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from .utils import SUM, interpreted, pdl_launch, wait_for_inputs

MAX_ROWS = 16  # callers take F.linear above this
MAX_K = 8192  # a program holds whole rows of W: callers take F.linear above this (the Talker's widest K is 6,144)
PER_PROGRAM = 8192  # weight values a program loads at once (BLOCK_N x BLOCK_K)
MIN_PROGRAMS = 256  # ~2 a SM of the H100's / H200's 132: fewer, and too few bytes are in flight


@triton.jit
def _rms_scaled(y, x_sq, K, eps, dtype: tl.constexpr):
    # a projection of a residual row whose RMSNorm weight was folded into W: the fp32 product rounded as stored, then
    # times the row's 1 / RMS (x_sq: its sum of squares), as kernels/add_rms_norm.py's rms_scaled rounds it
    return y.to(dtype).to(tl.float32) * tl.rsqrt(x_sq / K + eps)


@triton.jit
def _silu_mul(g, u, x_sq, K, eps, SCALED: tl.constexpr, dtype: tl.constexpr):
    # gate and up fp32 sums -> silu(gate) * up, rounded as the projection's output is stored and then as
    # kernels/swiglu.py rounds it; SCALED: both first times 1 / RMS of the x row whose squares sum to x_sq
    if SCALED:
        g = _rms_scaled(g, x_sq, K, eps, dtype).to(dtype).to(tl.float32)
        u = _rms_scaled(u, x_sq, K, eps, dtype).to(dtype).to(tl.float32)
    else:
        g = g.to(dtype).to(tl.float32)
        u = u.to(dtype).to(tl.float32)
    silu = (g / (1.0 + tl.exp(-g))).to(dtype).to(tl.float32)
    return (silu * u).to(dtype)


@triton.jit
def _add_and_store(y, bias, res_ptr, out_ptr, offs, mask, HAS_BIAS: tl.constexpr, ADD: tl.constexpr):
    # one row's outputs y (fp32) plus the bias and the residual where asked, rounded once and stored at offs
    if HAS_BIAS:
        y += bias
    if ADD:
        y += tl.load(res_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _weight_tile(w_ptr, N, K, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SWIGLU: tl.constexpr):
    # this program's BLOCK_N columns of W [N, K] (SWIGLU: gate|up [2N, K], the up rows too, else w again), over the
    # program's part of K (grid axis 1: whole rows where the grid has one part), in one load each:
    # (cols, col_ok, ks, k_ok, w, w_up); it reads nothing another kernel writes
    cols = tl.program_id(0).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    col_ok = cols < N
    k_ok = ks < K
    w_ok = col_ok[:, None] & k_ok[None, :]
    w = tl.load(w_ptr + cols[:, None] * K + ks[None, :], mask=w_ok, other=0.0)
    w_up = w
    if SWIGLU:
        w_up = tl.load(w_ptr + (cols + N)[:, None] * K + ks[None, :], mask=w_ok, other=0.0)
    return cols, col_ok, ks, k_ok, w, w_up


@triton.jit
def _gemv_kernel(x_ptr, w_ptr, bias_ptr, res_ptr, out_ptr, M, N, K, eps,
                 HAS_BIAS: tl.constexpr, ADD: tl.constexpr, PDL: tl.constexpr, SWIGLU: tl.constexpr,
                 SCALED: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    # x [M, K], w [N, K] contiguous; out [M, N] (ADD: out = res + x @ w^T, res [M, N], may be out itself).
    # SWIGLU: w is gate|up [2N, K]; out [M, N] = silu(gate) * up (_silu_mul), the gate and up rows of a column
    # in the same program. SCALED without SWIGLU: out = x @ w^T times x's 1 / RMS (_rms_scaled; no bias, no
    # residual). grid: cdiv(N, BLOCK_N); BLOCK_K >= K.
    cols, col_ok, ks, k_ok, w, w_up = _weight_tile(w_ptr, N, K, BLOCK_N, BLOCK_K, SWIGLU)
    wait_for_inputs(PDL)  # the weight needs nothing from the kernel ahead; x, bias and res may
    w = w.to(tl.float32)
    if SWIGLU:
        w_up = w_up.to(tl.float32)
    bias = tl.load(bias_ptr + cols, mask=col_ok & HAS_BIAS, other=0.0).to(tl.float32)  # no load without one
    for m in tl.static_range(BLOCK_M):
        x_ok = k_ok & (ks * 0 + m < M)  # rows past M (BLOCK_M is a power of two) load and store nothing
        out_ok = col_ok & (cols * 0 + m < M)
        x = tl.load(x_ptr + m * K + ks, mask=x_ok, other=0.0).to(tl.float32)
        y = tl.reduce(w * x[None, :], 1, SUM)
        if SWIGLU:  # (no bias, no residual)
            y = _silu_mul(y, tl.reduce(w_up * x[None, :], 1, SUM), tl.reduce(x * x, 0, SUM), K, eps, SCALED,
                          out_ptr.dtype.element_ty).to(tl.float32)
        elif SCALED:
            y = _rms_scaled(y, tl.reduce(x * x, 0, SUM), K, eps, out_ptr.dtype.element_ty)
        _add_and_store(y, bias, res_ptr, out_ptr, m * N + cols, out_ok, HAS_BIAS, ADD)


@triton.jit
def _split_dot(w, xt, SPLIT: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_M: tl.constexpr):
    # w [BLOCK_N, BLOCK_K] @ xt [BLOCK_K, BLOCK_M] in fp32 as SPLIT independent MMA chains over K's SPLIT parts
    # (a batched dot: the warps take the parts, where one dot would give every warp the whole K), summed in order.
    # "ieee": fp32 sums must not drop to TF32 (bf16 compiles to the same MMA either way).
    if SPLIT == 1:
        return tl.dot(w, xt, input_precision="ieee")
    part: tl.constexpr = BLOCK_K // SPLIT
    wb = tl.permute(tl.reshape(w, [BLOCK_N, SPLIT, part]), (1, 0, 2))
    xb = tl.reshape(xt, [SPLIT, part, BLOCK_M])
    return tl.reduce(tl.dot(wb, xb, input_precision="ieee"), 0, SUM)


@triton.jit
def _rows_epilogue(y, up, x_sq, cols, col_ok, rows, bias_ptr, res_ptr, out_ptr, M, N, K, eps,
                   HAS_BIAS: tl.constexpr, ADD: tl.constexpr, SWIGLU: tl.constexpr, SCALED: tl.constexpr):
    # out^T [BLOCK_N, BLOCK_M] from the whole K's fp32 sums: SwiGLU (x_sq: each row's sum of squares), the folded
    # norm's 1 / RMS (SCALED alone), or the bias and the residual, rounded once and stored
    out_offs = rows[None, :] * N + cols[:, None]
    out_ok = col_ok[:, None] & (rows[None, :] < M)
    if SWIGLU:  # (no bias, no residual)
        y = _silu_mul(y, up, x_sq[None, :], K, eps, SCALED, out_ptr.dtype.element_ty).to(tl.float32)
    elif SCALED:
        y = _rms_scaled(y, x_sq[None, :], K, eps, out_ptr.dtype.element_ty)
    bias = tl.load(bias_ptr + cols, mask=col_ok & HAS_BIAS, other=0.0).to(tl.float32)  # no load without one
    _add_and_store(y, bias[:, None], res_ptr, out_ptr, out_offs, out_ok, HAS_BIAS, ADD)


@triton.jit
def _gemv_rows_kernel(x_ptr, w_ptr, bias_ptr, res_ptr, out_ptr, part_ptr, count_ptr, M, N, K, eps,
                      HAS_BIAS: tl.constexpr, ADD: tl.constexpr, PDL: tl.constexpr, SWIGLU: tl.constexpr,
                      SCALED: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      SPLIT: tl.constexpr, UPCAST: tl.constexpr, PARTS: tl.constexpr, PART_VALUES: tl.constexpr):
    # The same as _gemv_kernel for 2-16 rows, in tensor-core MMAs: the tile of W [BLOCK_N, BLOCK_K] (loaded whole,
    # before the PDL wait) times x^T [BLOCK_K, BLOCK_M] (the rows padded to BLOCK_M = 16 with zeros) gives out^T
    # [BLOCK_N, BLOCK_M] in fp32 (_split_dot: SPLIT parts of the block), so W is read once for every row and no
    # row's sum crosses warps by hand. UPCAST: interpreted, the operands in fp32 (utils.interpreted).
    # PARTS > 1 (split-K): grid axis 1 cuts K into PARTS blocks; each program stores its fp32 sums (PART_VALUES
    # floats: y, and with SWIGLU up and x's squares) at part_ptr, counts itself in at count_ptr[its columns], and
    # the last to arrive adds the parts in order (the same bits whichever is last), resets the count and stores.
    cols, col_ok, ks, k_ok, w, w_up = _weight_tile(w_ptr, N, K, BLOCK_N, BLOCK_K, SWIGLU)
    wait_for_inputs(PDL)
    rows = tl.arange(0, BLOCK_M)
    xt = tl.load(x_ptr + rows[None, :] * K + ks[:, None], mask=k_ok[:, None] & (rows[None, :] < M), other=0.0)
    if UPCAST:
        w = w.to(tl.float32)
        xt = xt.to(tl.float32)
        if SWIGLU:
            w_up = w_up.to(tl.float32)
    y = _split_dot(w, xt, SPLIT, BLOCK_N, BLOCK_K, BLOCK_M)
    up = y
    x_sq = rows.to(tl.float32) * 0.0  # (tl.zeros is a jit function the interpreter cannot call here)
    if SWIGLU:
        up = _split_dot(w_up, xt, SPLIT, BLOCK_N, BLOCK_K, BLOCK_M)
    if SWIGLU or SCALED:  # (SCALED alone never splits K: _plan)
        x32 = xt.to(tl.float32)
        x_sq = tl.reduce(x32 * x32, 0, SUM)
    if PARTS == 1:
        _rows_epilogue(y, up, x_sq, cols, col_ok, rows, bias_ptr, res_ptr, out_ptr, M, N, K, eps,
                       HAS_BIAS, ADD, SWIGLU, SCALED)
    else:
        tile = tl.program_id(0)
        at = tl.arange(0, BLOCK_N)[:, None] * BLOCK_M + rows[None, :]
        parts = part_ptr + tile.to(tl.int64) * (PARTS * PART_VALUES)
        mine = parts + tl.program_id(1) * PART_VALUES
        tl.store(mine + at, y)
        if SWIGLU:
            tl.store(mine + BLOCK_N * BLOCK_M + at, up)
            tl.store(mine + 2 * BLOCK_N * BLOCK_M + rows, x_sq)
        tl.debug_barrier()  # every warp's sums are out before the count releases them to the last program
        if tl.atomic_add(count_ptr + tile, 1, sem="acq_rel", scope="gpu") == PARTS - 1:
            tl.debug_barrier()
            y = tl.load(parts + at, cache_modifier=".cg")  # from L2: another SM wrote it
            if SWIGLU:
                up = tl.load(parts + BLOCK_N * BLOCK_M + at, cache_modifier=".cg")
                x_sq = tl.load(parts + 2 * BLOCK_N * BLOCK_M + rows, cache_modifier=".cg")
            for p in tl.static_range(1, PARTS):
                y += tl.load(parts + p * PART_VALUES + at, cache_modifier=".cg")
                if SWIGLU:
                    up += tl.load(parts + p * PART_VALUES + BLOCK_N * BLOCK_M + at, cache_modifier=".cg")
                    x_sq += tl.load(parts + p * PART_VALUES + 2 * BLOCK_N * BLOCK_M + rows, cache_modifier=".cg")
            tl.atomic_xchg(count_ptr + tile, 0, sem="relaxed", scope="gpu")  # zero for the next launch
            _rows_epilogue(y, up, x_sq, cols, col_ok, rows, bias_ptr, res_ptr, out_ptr, M, N, K, eps,
                           HAS_BIAS, ADD, SWIGLU, SCALED)


@triton.jit
def _gemv_lanes_kernel(x_ptr, w_ptr, bias_ptr, res_ptr, out_ptr, M, N, K, eps,
                       HAS_BIAS: tl.constexpr, ADD: tl.constexpr, PDL: tl.constexpr, SWIGLU: tl.constexpr,
                       SCALED: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CHUNKS: tl.constexpr,
                       LANE_K: tl.constexpr, COLS_DIM: tl.constexpr):
    # The same contract as _gemv_kernel (1-16 rows), with the tile laid out so that each warp holds whole rows of W:
    # three dimensions, the columns (BLOCK_N, one warp each), K's chunks and LANE_K (a warp's 32 lanes x 8
    # contiguous values). Triton gives the warps the dimension that follows the contiguous one in its order, and
    # orders dimensions of equal contiguity differently by version (lanes_columns_dim): COLS_DIM puts the columns
    # there, so every row's sum is a warp's own: lanes' registers, then 5 shuffles, with no shared memory and no
    # barrier (the one-row kernel's [BLOCK_N, BLOCK_K] tile spreads K over 4 warps). x's row is loaded into the
    # same layout (each warp reads the whole row, from L1 after the first).
    cols = tl.program_id(0).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < N
    lane = tl.arange(0, LANE_K)[None, None, :]
    if COLS_DIM == 1:  # [CHUNKS, BLOCK_N, LANE_K]
        c3, ok3 = cols[None, :, None], col_ok[None, :, None]
        ks = tl.arange(0, CHUNKS)[:, None, None] * LANE_K + lane
    else:  # [BLOCK_N, CHUNKS, LANE_K]
        c3, ok3 = cols[:, None, None], col_ok[:, None, None]
        ks = tl.arange(0, CHUNKS)[None, :, None] * LANE_K + lane
    w_ok = (ks < K) & ok3
    w = tl.load(w_ptr + c3 * K + ks, mask=w_ok, other=0.0)
    w_up = w
    if SWIGLU:
        w_up = tl.load(w_ptr + (c3 + N) * K + ks, mask=w_ok, other=0.0)
    wait_for_inputs(PDL)  # the weight needs nothing from the kernel ahead; x, bias and res may
    bias = tl.load(bias_ptr + cols, mask=col_ok & HAS_BIAS, other=0.0).to(tl.float32)  # no load without one
    every_col = c3 * 0  # x's offsets broadcast over the columns: each warp loads the whole row
    chunks: tl.constexpr = 1 - COLS_DIM  # the chunks' dimension: summed in each thread first, then the lanes'
    for m in tl.static_range(BLOCK_M):
        x_ok = (ks < K) & (every_col + m < M)  # rows past M (BLOCK_M is a power of two) load and store nothing
        x = tl.load(x_ptr + m * K + ks + every_col, mask=x_ok, other=0.0).to(tl.float32)
        y = tl.reduce(tl.reduce(w.to(tl.float32) * x, chunks, SUM), 1, SUM)  # [BLOCK_N]
        if SWIGLU or SCALED:
            x_sq = tl.reduce(tl.reduce(x * x, chunks, SUM), 1, SUM)  # the row's, once a warp
        if SWIGLU:  # (no bias, no residual)
            up = tl.reduce(tl.reduce(w_up.to(tl.float32) * x, chunks, SUM), 1, SUM)
            y = _silu_mul(y, up, x_sq, K, eps, SCALED, out_ptr.dtype.element_ty).to(tl.float32)
        elif SCALED:
            y = _rms_scaled(y, x_sq, K, eps, out_ptr.dtype.element_ty)
        _add_and_store(y, bias, res_ptr, out_ptr, m * N + cols, col_ok & (cols * 0 + m < M), HAS_BIAS, ADD)


_DOT_UPCAST = interpreted(_gemv_rows_kernel)  # the interpreter's bf16 dots are wrong (utils.interpreted)
MMA_ROWS = 16  # x's rows padded to an MMA tile's side (tl.dot needs 16)
MMA_COLUMNS = 16  # output columns a rows-kernel program takes (wider: fewer programs, each reading x once for more)
MMA_MAX_VALUES = 65536  # weight values a rows-kernel program holds (16 columns x K 4,096; 8 warps, 256 a thread)
# fp32 (the tests' exact runs) has no bf16 MMA: Triton stages a dot's operands through shared memory, 8 bytes a
# weight value (sm_90, Triton 3.6: the predictor's o, 32,768 values, asked 256 KB of the 227 KB an SM has), so a
# 32-bit dot takes at most this many (128 KB); wider fp32 calls are not `fast` (gemv runs them on the one-row
# kernel; engine/qwen3tts/small_gemm.py sends them to cuBLAS).
MMA_MAX_FP32_DOT_VALUES = 16384
MMA_PARTS_A_WARP = 2  # K's parts a warp's MMA chains take (two chains interleave; one dot: every warp all of K)
# Split-K: where a program's whole rows would hold more weight values than this, K is cut into parts across
# programs (more, smaller programs: more SMs loading at once), each part's fp32 sums stored and added in order by the
# last program of the columns to finish. The kernel's own rule splits nothing; the engine passes its `gemv_split`
# (the code predictor's o and down in 2 and 3 parts at 16,384: docs/engine-loop.md).
MMA_SPLIT_ABOVE = 1 << 30


@dataclass(frozen=True, slots=True)
class RowsTiles:
    """_gemv_rows_kernel's launch: output columns a program takes, its K block (K rounded up to a power of two),
    the weight values a program holds (twice the columns' with gate|up), warps, column programs, the block's parts
    (one MMA chain each, summed in order: _split_dot), the bytes of a value (2: bf16 or fp16, 4: fp32), and the
    parts K is cut into across programs (split-K: the grid's second axis; 1: whole rows)."""

    block_n: int
    block_k: int
    values: int
    warps: int
    programs: int
    split: int
    value_bytes: int = 2
    parts: int = 1

    @property
    def part_values(self) -> int:
        """fp32 values a program of a split launch stores for the last one: its sums, and with gate|up the up
        rows' sums and x's squares by row."""
        pair = self.values > self.block_n * self.block_k
        return (2 * self.block_n * MMA_ROWS + MMA_ROWS) if pair else self.block_n * MMA_ROWS

    @property
    def fits(self) -> bool:
        """Whether the launch is meant to beat cuBLAS: at most MMA_MAX_VALUES a program (the predictor's o, 64
        programs, still reads faster than cuBLAS: no floor on the programs); in fp32 also at most
        MMA_MAX_FP32_DOT_VALUES a dot (shared memory)."""
        return self.values <= MMA_MAX_VALUES and (self.value_bytes <= 2
                                                  or self.block_n * self.block_k <= MMA_MAX_FP32_DOT_VALUES)


def rows_tiles(n: int, k: int, pair: bool = False, value_bytes: int = 2,
               split_above: int | None = None) -> RowsTiles:
    """The 2-16-row launch for n output columns over K = k (pair: each column a gate and an up row of W; W's
    values `value_bytes` each):
    MMA_COLUMNS columns a program, their rows whole, 4 warps up to 16,384 weight values and 8 above, K in
    MMA_PARTS_A_WARP parts a warp (each at least 16 deep). The predictor's q|k|v (K 1,024, N 4,096): 256 programs of
    4 warps; its o (K 2,048, N 1,024): 64 of 8; down (K 3,072 in a block of 4,096): 64 of 8; gate|up: 192 of 8. The
    Talker's down (K 6,144) does not fit and takes cuBLAS. Where whole rows would hold more than `split_above`
    values (default MMA_SPLIT_ABOVE), K is cut into the fewest parts whose blocks hold at most that many (split-K)."""
    per = 2 if pair else 1
    above = MMA_SPLIT_ABOVE if split_above is None else split_above
    block_k = triton.next_power_of_2(max(k, 16))
    while per * MMA_COLUMNS * block_k > above and block_k > 16:
        block_k //= 2  # the widest block within the bound gives the fewest parts
    parts = triton.cdiv(k, block_k)  # none left empty
    values = per * MMA_COLUMNS * block_k
    warps = 4 if values <= 16384 else 8
    split = max(1, min(MMA_PARTS_A_WARP * warps, block_k // 16))
    return RowsTiles(MMA_COLUMNS, block_k, values, warps, triton.cdiv(n, MMA_COLUMNS), split, value_bytes, parts)


def fast(m: int, n: int, k: int, pair: bool = False, value_bytes: int = 2, split_above: int | None = None,
         lanes: bool | None = None) -> bool:
    """Whether `gemv` (pair: `gemv_swiglu`, n its output columns) runs a call of m rows on a plan meant to beat
    cuBLAS: one row up to MAX_K, or 2-16 rows where the rows kernel fits (`split_above`: rows_tiles'), or with
    `lanes` (default LANES) where the lanes kernel does. Elsewhere it is correct but slower."""
    if m > MAX_ROWS or k > MAX_K:
        return False
    if (LANES if lanes is None else lanes) and lanes_tiles(n, k, pair, m).fits:
        return True
    return m <= 1 or rows_tiles(n, k, pair, value_bytes, split_above).fits


# The lanes kernel (_gemv_lanes_kernel; the engine option `gemv_layout = lanes`): a warp takes whole rows of W
LANE_K = 256  # K values a warp's 32 lanes hold in one chunk: 8 contiguous values a lane (16 bytes of bf16)
LANES_MAX_VALUES = 128  # weight values a thread holds at most at one row (K 4,096, or 2,048 of gate|up)
# ... and with 2-16 rows, where the rows' x loads in flight beside the weight's fp32 copy spilled registers at 128
# (sm_90, Triton 3.9: the predictor's down, K 3,072 in 16 chunks, 255 registers and 64-176 bytes of stack)
LANES_MAX_ROWS_VALUES = 64
# Rows a call may have to take the lanes kernel where asked: at 2-16 rows it measured slower than the MMA rows kernel
# (H100: a predictor layer at 8 rows 48.0 against 25.4 us with a store a row; 34.4 against 25.3 with one store for
# all rows, branch exp/lanes-one-store: each warp reloads x's rows for its column), at one row
# faster than the one-row kernel (16.8 against 18.6 us: docs/benchmarks/h200-step-profile/lanes-1207p)
LANES_MAX_ROWS = 1
LANES = False  # whether calls that fit take the lanes kernel where the caller does not say (the tests)


@dataclass(frozen=True, slots=True)
class LanesTiles:
    """_gemv_lanes_kernel's launch: columns a program (one warp each), K's LANE_K chunks (a power of two), the
    programs, and the weight values a thread holds (twice the chunk values with gate|up)."""

    block_n: int
    chunks: int
    programs: int
    values: int
    rows: int = 1

    @property
    def fits(self) -> bool:
        if self.rows > LANES_MAX_ROWS:
            return False
        return self.values <= (LANES_MAX_VALUES if self.rows <= 1 else LANES_MAX_ROWS_VALUES)


@functools.cache
def lanes_columns_dim() -> int:
    """The lanes kernel's COLS_DIM for the Triton installed: 1 where it gives the warps the middle dimension of a
    [chunks, columns, lanes] tile (Triton 3.9 orders dimensions of equal contiguity last to first), 0 where it gives
    them the first (3.6 orders them first to last). Found by compiling the kernel's tile for sm_90 once (no GPU
    needed; under the interpreter layouts do not exist: 1)."""
    if interpreted(_gemv_lanes_kernel):
        return 1
    import warnings

    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    consts = dict(HAS_BIAS=False, ADD=False, PDL=0, SWIGLU=False, SCALED=False, BLOCK_M=1, BLOCK_N=2, CHUNKS=2,
                  LANE_K=LANE_K, COLS_DIM=1)
    params = ["x_ptr", "w_ptr", "bias_ptr", "res_ptr", "out_ptr", "M", "N", "K", "eps", *consts]
    sig = {p: "constexpr" if p in consts else "*bf16" if p.endswith("_ptr") else "fp32" if p == "eps" else "i32"
           for p in params}
    attrs = {(params.index(p),): [["tt.divisibility", 16]] for p in params if p.endswith("_ptr") or p == "K"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ttgir = triton.compile(ASTSource(_gemv_lanes_kernel, sig, consts, attrs), target=GPUTarget("cuda", 90, 32),
                               options={"num_warps": 2, "num_stages": 1}).asm["ttgir"]
    return 1 if "threadsPerWarp = [1, 1, 32], warpsPerCTA = [1, 2, 1]" in ttgir else 0


def lanes_tiles(n: int, k: int, pair: bool = False, rows: int = 1) -> LanesTiles:
    """The lanes launch of `rows` rows for n output columns over K = k (pair: a gate and an up row a column): 8
    columns (warps) a program, halved while the programs number fewer than MIN_PROGRAMS. The 1.7B code predictor:
    q|k|v 512 programs of 8, o 256 of 4, gate|up 384 of 8, down (K 3,072 in 16 chunks) 256 of 4 (one row only); the
    Talker's q|k|v and o fit at any row count, its gate|up at one row, its down (K 6,144) never."""
    chunks = triton.next_power_of_2(triton.cdiv(max(k, 1), LANE_K))
    block_n = 8
    while block_n > 1 and triton.cdiv(n, block_n) < MIN_PROGRAMS:
        block_n //= 2
    return LanesTiles(block_n, chunks, triton.cdiv(n, block_n), chunks * (LANE_K // 32) * (2 if pair else 1), rows)


@dataclass(frozen=True, slots=True)
class Tiles:
    """One launch's shape: output columns a program takes, its K block (>= K) and warps."""

    block_n: int
    block_k: int
    warps: int


def tiles(n: int, k: int) -> Tiles:
    """The launch for W [n, k], from a fixed rule (no autotuning: a graph capture must not tune).

    - BLOCK_K = K rounded up to a power of two: each program reads whole rows of W.
    - BLOCK_N = PER_PROGRAM / BLOCK_K, halved (down to 1) while the programs number fewer than MIN_PROGRAMS.
    - warps: 32 weight values a thread, 1 to 8.
    1.7B code predictor: q|k|v (K 1,024, N 4,096) 8 columns, 512 programs; o (2,048 -> 1,024) 4, 256; gate|up
    (1,024 -> 6,144) 8, 768; down (3,072 -> 1,024) 2, 512; a head (1,024 -> 2,048) 8, 256.
    """
    block_k = triton.next_power_of_2(max(k, 1))
    block_n = max(1, PER_PROGRAM // block_k)
    while block_n > 1 and triton.cdiv(n, block_n) < MIN_PROGRAMS:
        block_n //= 2
    return Tiles(block_n, block_k, max(1, min(8, block_n * block_k // 1024)))


def _check(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
    assert x.dim() == 2 and x.is_contiguous() and weight.is_contiguous(), (x.shape, x.stride(), weight.stride())
    assert weight.dim() == 2 and weight.shape[1] == x.shape[1] and weight.dtype == x.dtype, (x.shape, weight.shape)
    assert x.dtype in (torch.bfloat16, torch.float16, torch.float32), x.dtype
    assert x.shape[0] <= MAX_ROWS, f"gemv takes at most {MAX_ROWS} rows, not {x.shape[0]}: use F.linear"
    assert x.shape[1] <= MAX_K, f"gemv takes K up to {MAX_K}, not {x.shape[1]}: use F.linear"
    assert bias is None or (bias.shape == (weight.shape[0],) and bias.dtype == x.dtype), bias


def gemv(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, pdl: bool | str = False,
         residual: torch.Tensor | None = None, split_above: int | None = None,
         norm_eps: float | None = None, lanes: bool | None = None) -> torch.Tensor:
    """x [M, K] (M <= 16, K <= MAX_K), weight [N, K], bias [N] or None -> [M, N] in x's dtype; with `residual`
    [M, N], residual + that, written into residual in place (and returned). `split_above`: rows_tiles'. norm_eps:
    x is a residual stream whose RMSNorm (this eps; its weight folded into `weight`) the call applies: the product
    times each row's 1 / RMS (no bias, no residual; as rms_scaled rounds it). `lanes` (default LANES): the lanes
    kernel where it fits, at any row count."""
    _check(x, weight, bias)
    m = x.shape[0]
    n = weight.shape[0]
    if residual is not None:
        assert residual.is_contiguous() and residual.shape == (m, n), residual.shape
        assert residual.dtype == x.dtype, (residual.dtype, x.dtype)
        out = residual
    else:
        out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if m == 0 or n == 0:
        return out
    scaled = norm_eps is not None
    assert not scaled or (bias is None and residual is None), "a normed call takes no bias and no residual"
    flags = dict(HAS_BIAS=bias is not None, ADD=residual is not None, SWIGLU=False, SCALED=scaled)
    step_kernel, grid, launch = _plan(x, n, pdl, False, split_above, whole=scaled, lanes=lanes)
    step_kernel[grid](x, weight, bias if bias is not None else x, out, out, M=m, N=n, K=x.shape[1],
                      eps=norm_eps if scaled else 0.0, **flags, **launch)
    return out


def _plan(x: torch.Tensor, n: int, pdl: bool | str, pair: bool, split_above: int | None,
          whole: bool = False, lanes: bool | None = None) -> tuple[object, tuple[int, ...], dict]:
    """(kernel, grid, its keyword arguments) for out [M, n] from x [M, K]: with `lanes` (default LANES) the lanes
    kernel where it fits; else 2-16 rows take the rows kernel where it fits (`fast`; split K's scratch included;
    `whole`: only unsplit, as a normed call needs each row's whole sum of squares in one program), else the one-row
    kernel, whose programs take half the columns with `pair` (each column reads two rows of W: gate and up)."""
    m, k = x.shape
    if LANES if lanes is None else lanes:
        t = lanes_tiles(n, k, pair, m)
        if t.fits:
            on, extra = pdl_launch(_gemv_lanes_kernel, pdl)
            return _gemv_lanes_kernel, (t.programs,), dict(
                PDL=on, BLOCK_M=triton.next_power_of_2(m), BLOCK_N=t.block_n, CHUNKS=t.chunks, LANE_K=LANE_K,
                COLS_DIM=lanes_columns_dim(), num_warps=t.block_n, **extra)
    value_bytes = x.element_size()
    split_above = 1 << 30 if whole else split_above  # (whole rows, whatever MMA_SPLIT_ABOVE says)
    if m > 1 and fast(m, n, k, pair, value_bytes, split_above):
        r = rows_tiles(n, k, pair, value_bytes, split_above)
        on, extra = pdl_launch(_gemv_rows_kernel, pdl)
        parts, counts = (x, x) if r.parts == 1 else _split_scratch(x.device, r.programs * r.parts * r.part_values,
                                                                      r.programs)
        return _gemv_rows_kernel, (r.programs, r.parts), dict(
            part_ptr=parts, count_ptr=counts, PDL=on, BLOCK_M=MMA_ROWS, BLOCK_N=r.block_n, BLOCK_K=r.block_k,
            SPLIT=r.split, UPCAST=_DOT_UPCAST, PARTS=r.parts, PART_VALUES=r.part_values, num_warps=r.warps, **extra)
    per = 2 if pair else 1
    t = tiles(per * n, k)
    block_n = max(1, t.block_n // per)
    on, extra = pdl_launch(_gemv_kernel, pdl)
    return _gemv_kernel, (triton.cdiv(n, block_n),), dict(
        PDL=on, BLOCK_M=triton.next_power_of_2(m), BLOCK_N=block_n, BLOCK_K=t.block_k, num_warps=t.warps, **extra)


@dataclass
class _Scratch:
    partials: torch.Tensor  # fp32: split launches' sums by part
    counts: torch.Tensor  # int32 a column tile: programs arrived; every launch leaves them zero
    retired: list[torch.Tensor]  # smaller buffers a captured graph may still point at: never freed


_SCRATCH: dict[tuple[torch.device, int], _Scratch] = {}


def _split_scratch(device: torch.device, floats: int, tiles: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(partials, counts) for a split launch, one pair per device and stream: launches on one stream run one after
    another (a PDL launch waits for the one ahead before it touches them), and a graph replays where its capture ran
    alone (engine/graphs.py: a set captures on a stream of its own). Made at a graph's eager warm-up as a rule; made
    or grown inside a capture, the counts' zeroing joins the graph, where they are zero anyway. Never freed: a
    captured graph keeps its pointers."""
    stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0
    key = (device, stream)
    have = _SCRATCH.get(key)
    if have is not None and have.partials.numel() >= floats and have.counts.numel() >= tiles:
        return have.partials, have.counts
    floats = max(floats, have.partials.numel() if have else 0, 1 << 16)
    tiles = max(tiles, have.counts.numel() if have else 0, 1024)
    retired = [*have.retired, have.partials, have.counts] if have else []
    _SCRATCH[key] = _Scratch(torch.empty(floats, dtype=torch.float32, device=device),
                             torch.zeros(tiles, dtype=torch.int32, device=device), retired)
    return _SCRATCH[key].partials, _SCRATCH[key].counts


def gemv_swiglu(x: torch.Tensor, gate_up: torch.Tensor, eps: float = 0.0, scaled: bool = False,
                pdl: bool | str = False, split_above: int | None = None, lanes: bool | None = None) -> torch.Tensor:
    """x [M, K] @ gate_up^T ([2I, K]: gate rows then up rows) -> silu(gate) * up [M, I], in one launch instead of a
    projection and kernels/swiglu.py's kernel, rounded as those two round. `scaled`: gate and up are first scaled
    by 1 / RMS of x's rows (eps added to the mean square: the folded norm, where x is the residual stream)."""
    _check(x, gate_up, None)
    m = x.shape[0]
    assert gate_up.shape[0] % 2 == 0, gate_up.shape
    n = gate_up.shape[0] // 2
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if m == 0 or n == 0:
        return out
    flags = dict(HAS_BIAS=False, ADD=False, SWIGLU=True, SCALED=scaled)
    step_kernel, grid, launch = _plan(x, n, pdl, True, split_above, lanes=lanes)
    step_kernel[grid](x, gate_up, x, out, out, M=m, N=n, K=x.shape[1], eps=eps, **flags, **launch)
    return out


def gemv_swiglu_ref(x: torch.Tensor, gate_up: torch.Tensor, eps: float = 0.0, scaled: bool = False,
                    pdl: bool | str = False) -> torch.Tensor:
    """The projection (F.linear, rounded to x's dtype), then kernels/swiglu.py's reference on it."""
    from .swiglu import swiglu_ref

    _check(x, gate_up, None)
    return swiglu_ref(F.linear(x, gate_up), residual=x if scaled else None, eps=eps)


def gemv_add_(residual: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, pdl: bool | str = False,
              split_above: int | None = None, lanes: bool | None = None) -> torch.Tensor:
    """residual [M, N] += x [M, K] @ weight^T in place, rounded once (cuBLAS's addmm_ with beta = 1); returns it."""
    return gemv(x, weight, None, pdl, residual=residual, split_above=split_above, lanes=lanes)


def gemv_ref(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, pdl: bool | str = False,
             residual: torch.Tensor | None = None, norm_eps: float | None = None) -> torch.Tensor:
    """The same as F.linear (what cuBLAS runs), or with `residual` its addmm_ (beta = 1), or with norm_eps the
    product scaled by x's 1 / RMS (kernels/add_rms_norm.py's rms_scaled); `pdl` is ignored."""
    _check(x, weight, bias)
    if norm_eps is not None:
        from .add_rms_norm import rms_scaled

        assert bias is None and residual is None, "a normed call takes no bias and no residual"
        return rms_scaled(F.linear(x, weight), x, norm_eps)
    if residual is not None:
        return residual.addmm_(x, weight.t()) if bias is None else residual.add_(F.linear(x, weight, bias))
    return F.linear(x, weight, bias)


def gemv_add_ref(residual: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
                 pdl: bool | str = False) -> torch.Tensor:
    """residual += x @ weight^T through cuBLAS's addmm_ (beta = 1, one rounding)."""
    return gemv_ref(x, weight, None, pdl, residual=residual)

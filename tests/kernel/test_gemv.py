"""kernels/gemv.py (a projection of 1-16 rows, each program a whole tile of W; added into a residual in place)
against F.linear and addmm_ on fresh random inputs (Triton's interpreter without a GPU, compiled on CUDA), and its
sm_90 code (compiled here without a GPU)."""

from __future__ import annotations

from types import ModuleType

import pytest
import torch

pytest.importorskip("triton")

from kernel_cases import STEP_TOL
from triton_mode import DEVICE, compiled_copy, hopper_compile, kernel_module

pytestmark = pytest.mark.usefixtures("no_tf32")  # fp32 against cuBLAS's true fp32, not TF32

# fp32: the sums differ only in order. bf16: one rounding of the same fp32 sum on both sides, but the interpreter
# truncates where the GPU rounds to nearest (one bf16 step, 2^-7 relative at worst): STEP_TOL's 2e-2.
TOL = STEP_TOL
# The fused SwiGLU rounds four times after the sum (gate, up, silu, product: kernels/swiglu.py's roundings), and the
# interpreter truncates each (test_swiglu.py's tolerance for the same chain)
SWIGLU_TOL = {torch.float32: STEP_TOL[torch.float32], torch.bfloat16: dict(rtol=4 * 2**-7, atol=4 * 2**-7)}
# (K, N) interpreted: K neither a power of two nor a multiple of 16; N not a multiple of the columns a program takes
SMALL = [(100, 50), (200, 70)]


@pytest.fixture(scope="module")
def mod() -> ModuleType:
    return kernel_module("gemv")


# split-K at the small shapes: a program's block of K 32 deep (K 100 in 4 parts, 200 in 7, 300 in 10)
SMALL_SPLIT_ABOVE = 16 * 32


@pytest.fixture(params=["mma", "mma-split", "one-row", "lanes"])
def plan(request: pytest.FixtureRequest, mod: ModuleType, monkeypatch: pytest.MonkeyPatch) -> str:
    """Which kernel takes 2-16 rows at the small shapes: the MMA rows kernel (as shipped), the same with K cut
    into parts across programs (split-K), the one-row kernel (what a K too wide for the rows kernel takes: its
    weight ceiling lowered to 0 here), or the lanes kernel at every row count (gemv_layout = lanes; K 100-300 in
    one or two chunks of 256). A split launch leaves every count it used at zero."""
    if request.param == "one-row":
        monkeypatch.setattr(mod, "MMA_MAX_VALUES", 0)
    if request.param.startswith("lanes"):  # at every row count (the engine takes it at one row only)
        monkeypatch.setattr(mod, "LANES", True)
        monkeypatch.setattr(mod, "LANES_MAX_ROWS", mod.MAX_ROWS)
    if request.param == "mma-split":
        monkeypatch.setattr(mod, "MMA_SPLIT_ABOVE", SMALL_SPLIT_ABOVE)
    yield request.param
    for scratch in mod._SCRATCH.values():
        assert not scratch.counts.any(), "a split launch left a count behind"


def _inputs(rows: int, k: int, n: int, dtype: torch.dtype, bias: bool = False):
    x = torch.randn(rows, k, device=DEVICE).to(dtype)
    w = (torch.randn(n, k, device=DEVICE) / k**0.5).to(dtype)
    b = torch.randn(n, device=DEVICE).to(dtype) if bias else None
    return x, w, b


def _assert_close(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype == dtype
    torch.testing.assert_close(got.float(), want.float(), **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 3, 16])
@pytest.mark.parametrize("k,n", SMALL)
@pytest.mark.parametrize("bias", [False, True], ids=["plain", "bias"])
def test_gemv_matches_linear(mod: ModuleType, plan: str, dtype: torch.dtype, rows: int, k: int, n: int,
                             bias: bool) -> None:
    x, w, b = _inputs(rows, k, n, dtype, bias)
    _assert_close(mod.gemv(x, w, b), mod.gemv_ref(x, w, b), dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 5])
def test_gemv_add_adds_into_the_residual_in_place(mod: ModuleType, plan: str, dtype: torch.dtype, rows: int) -> None:
    """residual += x @ W^T, the sum rounded once, as cuBLAS's addmm_ with beta = 1; the residual tensor itself
    changes, and it is returned."""
    k, n = 200, 70
    x, w, _ = _inputs(rows, k, n, dtype)
    residual = torch.randn(rows, n, device=DEVICE).to(dtype)
    want = mod.gemv_add_ref(residual.clone(), x, w)
    got = residual.clone()
    ptr = got.data_ptr()
    out = mod.gemv_add_(got, x, w)
    assert out is got and got.data_ptr() == ptr
    _assert_close(got, want, dtype)
    assert not torch.equal(got, residual)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_rows_kernel_at_a_shape_it_takes_as_shipped(mod: ModuleType, dtype: torch.dtype) -> None:
    """2-16 rows as shipped (K 300 in a block of 512, 8 parts of 64 over 4 warps; N 70: 5 programs of 16 columns,
    the last part empty), plain with a bias, added into a residual, and as gate|up."""
    k, n, rows = 300, 70, 8
    r = mod.rows_tiles(n, k)
    assert (r.block_n, r.block_k, r.programs, r.split) == (16, 512, 5, 8) and r.fits and mod.fast(rows, n, k), r
    assert mod.fast(rows, n // 2, k, pair=True)
    x, w, b = _inputs(rows, k, n, dtype, bias=True)
    _assert_close(mod.gemv(x, w, b), mod.gemv_ref(x, w, b), dtype)
    residual = torch.randn(rows, n, device=DEVICE).to(dtype)
    _assert_close(mod.gemv_add_(residual.clone(), x, w), mod.gemv_add_ref(residual.clone(), x, w), dtype)
    for scaled in (False, True):
        torch.testing.assert_close(mod.gemv_swiglu(x, w, 1e-6, scaled, pdl=True).float(),
                                   mod.gemv_swiglu_ref(x, w, 1e-6, scaled).float(), **SWIGLU_TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 3, 8])
@pytest.mark.parametrize("scaled", [False, True], ids=["plain", "scaled"])
@pytest.mark.parametrize("k,inner", [(200, 35), (300, 1050)])
def test_gemv_swiglu_is_the_projection_then_swiglu(mod: ModuleType, plan: str, dtype: torch.dtype, rows: int,
                                                   scaled: bool, k: int, inner: int) -> None:
    """silu(gate) * up of one projection, in one launch, against F.linear then kernels/swiglu.py's reference (with
    `scaled`, the folded norm: 1 / RMS of x's rows); at (300, 1050) the rows kernel's programs hold 16 columns'
    gate and up rows, 66 programs, the last one part empty. x is scaled up so that the folded norm's factor is far
    from 1."""
    x, w, _ = _inputs(rows, k, 2 * inner, dtype)
    x = (x.float() * 3).to(dtype)
    got, want = mod.gemv_swiglu(x, w, 1e-6, scaled), mod.gemv_swiglu_ref(x, w, 1e-6, scaled)
    assert got.shape == want.shape == (rows, inner) and got.dtype == dtype
    torch.testing.assert_close(got.float(), want.float(), **SWIGLU_TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 3, 16])
def test_a_normed_gemv_scales_each_row_by_its_rms(mod: ModuleType, plan: str, dtype: torch.dtype, rows: int) -> None:
    """norm_eps (a head whose stack's final RMSNorm is folded into it): the product times each row's 1 / RMS, as
    kernels/add_rms_norm.py's rms_scaled rounds it, whatever the plan (a split plan takes whole rows here: each
    row's sum of squares in one program); no bias or residual with it. x is scaled up so that 1 / RMS is far
    from 1."""
    x, w, _ = _inputs(rows, 300, 70, dtype)
    x = (x.float() * 3).to(dtype)
    _assert_close(mod.gemv(x, w, norm_eps=1e-6, pdl=True), mod.gemv_ref(x, w, norm_eps=1e-6), dtype)
    with pytest.raises(AssertionError, match="no bias"):
        mod.gemv(x, w, torch.zeros(70, dtype=dtype, device=DEVICE), norm_eps=1e-6)


def test_gemv_repeats_bitwise(mod: ModuleType, plan: str) -> None:
    """One launch; split, the parts are added in order whichever program finishes last: every call gives the same
    bits."""
    x, w, b = _inputs(3, 200, 70, torch.float32, bias=True)
    first = mod.gemv(x, w, b)
    assert torch.equal(mod.gemv(x, w, b), first)


@pytest.mark.parametrize("columns", [16, 32])
def test_split_k_takes_the_same_sums_as_whole_rows(mod: ModuleType, monkeypatch: pytest.MonkeyPatch,
                                                   columns: int) -> None:
    """K cut into parts (each program's sums stored, the last to arrive adding them in order) against the same
    call with whole rows: fp32 sums in another order only, rounded once; gate|up with the folded norm's squares
    summed across parts too; with 16 columns a program (as shipped) and 32 (MMA_COLUMNS, which the rows chain
    varies)."""
    x, w, b = _inputs(8, 200, 70, torch.float32, bias=True)
    x = x * 3
    whole = mod.gemv(x, w, b), mod.gemv_swiglu(x, w, 1e-6, True)
    monkeypatch.setattr(mod, "MMA_COLUMNS", columns)
    monkeypatch.setattr(mod, "MMA_SPLIT_ABOVE", SMALL_SPLIT_ABOVE * columns // 16)
    assert mod.rows_tiles(70, 200).parts == 7 and mod.rows_tiles(35, 200, pair=True).parts == 13
    assert mod.rows_tiles(70, 200).programs == -(-70 // columns)
    split = mod.gemv(x, w, b), mod.gemv_swiglu(x, w, 1e-6, True)
    for got, want in zip(split, whole, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_the_rule_fills_the_gpu_with_whole_rows() -> None:
    """The rule (host side only): each program reads whole rows of W (BLOCK_K >= K), holds at most PER_PROGRAM
    values, and the columns give at least MIN_PROGRAMS programs unless a program is down to one column."""
    from voxgate.kernels.gemv import MIN_PROGRAMS, PER_PROGRAM, tiles

    for k, n in [(1024, 4096), (2048, 1024), (1024, 6144), (3072, 1024), (1024, 2048), (2048, 12288),
                 (6144, 2048), (100, 50)]:
        t = tiles(n, k)
        assert t.block_k >= k and t.block_k & (t.block_k - 1) == 0, (k, n, t)
        assert t.block_n * t.block_k <= max(PER_PROGRAM, t.block_k), (k, n, t)
        assert -(-n // t.block_n) >= MIN_PROGRAMS or t.block_n == 1, (k, n, t)
        assert 1 <= t.warps <= 8
    assert tiles(1024, 2048) == tiles(1024, 2048)
    assert tiles(4096, 1024).block_n == 8 and tiles(1024, 3072).block_n == 2  # q|k|v and down of the predictor


def test_the_rows_rule_takes_whole_rows_up_to_k_4096() -> None:
    """The 2-16-row rule (host side): MMA_COLUMNS columns a program, their rows whole (a power of two >= K), at most
    MMA_MAX_VALUES weight values for `fast` to send a call there: every projection of the predictor and its heads,
    the Talker's q|k|v, o and gate|up fit; the Talker's down (K 6,144) does not and takes cuBLAS, while one row
    takes the one-row kernel at every K up to MAX_K. Each warp's MMA chains take MMA_PARTS_A_WARP parts of K."""
    from voxgate.kernels.gemv import MMA_COLUMNS, MMA_MAX_VALUES, MMA_PARTS_A_WARP, fast, rows_tiles

    for k, n, pair in [(1024, 4096, False), (2048, 1024, False), (1024, 3072, True), (3072, 1024, False),
                       (1024, 2048, False), (2048, 4096, False), (2048, 2048, False), (2048, 6144, True)]:
        r = rows_tiles(n, k, pair)
        assert r.block_n == MMA_COLUMNS and r.block_k >= k and r.values <= MMA_MAX_VALUES, (k, n, r)
        assert r.fits and fast(8, n, k, pair) and fast(16, n, k, pair) and fast(2, n, k, pair), (k, n, pair)
        assert r.split == MMA_PARTS_A_WARP * r.warps and r.block_k // r.split >= 16, r
    assert rows_tiles(4096, 1024).programs == 256 and rows_tiles(4096, 1024).warps == 4
    assert rows_tiles(32, 32).split == 2  # K's parts stay at least an MMA's 16 deep
    for k, n, pair in [(6144, 2048, False), (4096, 3072, True)]:
        assert not rows_tiles(n, k, pair).fits and not fast(8, n, k, pair) and fast(1, n, k, pair), (k, n, pair)
        assert rows_tiles(n, k, pair).parts == 1  # as shipped, nothing splits K


@pytest.mark.parametrize("above", [32768, 16384, 8192])
def test_the_split_rule_cuts_k_into_the_fewest_full_parts(mod: ModuleType, monkeypatch: pytest.MonkeyPatch,
                                                          above: int) -> None:
    """With MMA_SPLIT_ABOVE lowered, a program's block holds at most that many weight values, K takes the fewest
    parts that allows, and no part is empty: the predictor's o (K 2,048) in 1 / 2 / 4 parts, its down (K 3,072)
    in 2 / 3 / 6, the Talker's down (K 6,144, too wide whole) in 3 / 6 / 12, and it then fits."""
    monkeypatch.setattr(mod, "MMA_SPLIT_ABOVE", above)
    shapes = [(1024, 4096, False), (2048, 1024, False), (1024, 3072, True), (3072, 1024, False),
              (2048, 4096, False), (2048, 6144, True), (6144, 2048, False)]
    for k, n, pair in shapes:
        r = mod.rows_tiles(n, k, pair)
        assert r.values <= above and (r.parts - 1) * r.block_k < k <= r.parts * r.block_k, (k, n, pair, r)
        assert r.fits and mod.fast(8, n, k, pair), (k, n, pair, r)
        smaller = (2 if pair else 1) * r.block_k * mod.MMA_COLUMNS * 2  # the block one size up holds too many
        assert r.parts == 1 or smaller > above, (k, n, pair, r)
    parts = {k: mod.rows_tiles(1024 if k < 6144 else 2048, k).parts for k in (2048, 3072, 6144)}
    assert parts == {32768: {2048: 1, 3072: 2, 6144: 3}, 16384: {2048: 2, 3072: 3, 6144: 6},
                     8192: {2048: 4, 3072: 6, 6144: 12}}[above], parts


def test_gemv_refuses_bad_shapes(mod: ModuleType) -> None:
    x = torch.randn(2, 8, device=DEVICE)
    with pytest.raises(AssertionError):
        mod.gemv(x, torch.randn(4, 6, device=DEVICE))
    with pytest.raises(AssertionError, match="at most 16 rows"):
        mod.gemv(torch.randn(17, 8, device=DEVICE), torch.randn(4, 8, device=DEVICE))
    with pytest.raises(AssertionError, match="K up to"):
        mod.gemv(torch.randn(1, mod.MAX_K + 1, device=DEVICE), torch.randn(4, mod.MAX_K + 1, device=DEVICE))
    with pytest.raises(AssertionError):
        mod.gemv(x, torch.randn(4, 8, device=DEVICE), torch.randn(3, device=DEVICE))
    with pytest.raises(AssertionError):
        mod.gemv_add_(torch.randn(2, 5, device=DEVICE), x, torch.randn(4, 8, device=DEVICE))
    assert mod.gemv(torch.randn(0, 8, device=DEVICE), torch.randn(4, 8, device=DEVICE)).shape == (0, 4)


@pytest.mark.parametrize("pdl", [0, 1, 2], ids=["plain", "pdl", "pdl-late"])
def test_the_weight_tile_is_loaded_whole_and_before_the_wait(pdl: int) -> None:
    """The compiler's sm_90 output (no GPU needed) for q|k|v at 1 row: the weight arrives in 16-byte vector loads
    with no K loop, and with PDL every weight load comes before griddepcontrol.wait, which comes before x's load;
    the next kernel is released (launch_dependents) just before the wait (mode 1) or just after it (2, "late")."""
    g = compiled_copy("gemv")
    t = g.tiles(4096, 1024)
    consts = dict(HAS_BIAS=False, ADD=False, PDL=pdl, SWIGLU=False, SCALED=False, BLOCK_M=1, BLOCK_N=t.block_n,
                  BLOCK_K=t.block_k)
    ptx = hopper_compile(g._gemv_kernel, consts, warps=t.warps, stages=3, divisible_ints=("K",)).asm["ptx"]
    assert "ld.global.v4.b32" in ptx and "Loop Header" not in ptx
    if not pdl:
        assert "griddepcontrol" not in ptx
        return
    lines = ptx.splitlines()
    wait = next(i for i, line in enumerate(lines) if "griddepcontrol.wait" in line)
    release = next(i for i, line in enumerate(lines) if "griddepcontrol.launch_dependents" in line)
    loads = [i for i, line in enumerate(lines) if "ld.global" in line]
    vector_loads = [i for i in loads if "ld.global.v4" in lines[i]]
    assert vector_loads and max(vector_loads) < wait and (release < wait if pdl == 1 else release > wait)
    assert any(i > wait for i in loads)  # x, after the wait


@pytest.mark.parametrize("swiglu", [False, True], ids=["qkv", "gate-up"])
def test_the_rows_kernel_is_mma_after_its_weights(swiglu: bool) -> None:
    """sm_90 output of the rows kernel (no GPU needed) for the predictor's q|k|v and its fused gate|up: the rows'
    products are tensor-core MMAs (mma.sync, no per-row reduction across warps), each warp its own share of K (no
    warp repeats another's MMAs, as one dot of the whole tile made them), and every weight arrives in 16-byte loads
    before the PDL wait."""
    g = compiled_copy("gemv")
    r = g.rows_tiles(3072 if swiglu else 4096, 1024, swiglu)
    consts = dict(HAS_BIAS=False, ADD=not swiglu, PDL=1, SWIGLU=swiglu, SCALED=swiglu, BLOCK_M=g.MMA_ROWS,
                  BLOCK_N=r.block_n, BLOCK_K=r.block_k, SPLIT=r.split, UPCAST=False, PARTS=r.parts,
                  PART_VALUES=r.part_values)
    ptx = hopper_compile(g._gemv_rows_kernel, consts, warps=r.warps, stages=1, divisible_ints=("K",)).asm["ptx"]
    assert "mma.sync" in ptx and "shfl" not in ptx.split("griddepcontrol.wait")[0]
    instructions = (r.block_n // 16) * (g.MMA_ROWS // 8) * (r.block_k // 16)  # m16n8k16 over the whole tile
    assert ptx.count("mma.sync") == (2 if swiglu else 1) * instructions // r.warps
    lines = ptx.splitlines()
    wait = next(i for i, line in enumerate(lines) if "griddepcontrol.wait" in line)
    weight_loads = [i for i, line in enumerate(lines) if "ld.global.v4" in line]
    assert weight_loads and sum(i < wait for i in weight_loads) >= r.values // (8 * 32 * r.warps)


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_every_rows_launch_that_fits_compiles_within_an_sms_shared_memory(dtype: str) -> None:
    """sm_90 output (no GPU needed) of each rows-kernel launch `fast` takes at the predictor's and the Talker's
    shapes: its shared memory fits an H100's / H200's 227 KB a block. In fp32 (the tests' exact runs) the wide
    tiles (the predictor's o and down) do not fit (256 and 512 KB asked) and take the one-row kernel."""
    from triton_mode import cubin_resources

    g = compiled_copy("gemv")
    value_bytes = 4 if dtype == "fp32" else 2
    shapes = [(1024, 4096, False), (2048, 1024, False), (1024, 3072, True), (3072, 1024, False),
              (1024, 2048, False), (2048, 4096, False), (2048, 6144, True)]
    taken = {(k, n, pair) for k, n, pair in shapes if g.fast(8, n, k, pair, value_bytes)}
    wide = {(2048, 1024, False), (3072, 1024, False)}
    assert wide <= taken if dtype == "bf16" else not wide & taken and (1024, 4096, False) in taken, taken
    for k, n, pair in sorted(taken):
        r = g.rows_tiles(n, k, pair, value_bytes)
        consts = dict(HAS_BIAS=False, ADD=not pair, PDL=1, SWIGLU=pair, SCALED=pair, BLOCK_M=g.MMA_ROWS,
                      BLOCK_N=r.block_n, BLOCK_K=r.block_k, SPLIT=r.split, UPCAST=False, PARTS=r.parts,
                      PART_VALUES=r.part_values)
        desc = {p: f"*{dtype}" for p in ("x_ptr", "w_ptr", "bias_ptr", "res_ptr", "out_ptr")}
        compiled = hopper_compile(g._gemv_rows_kernel, consts, desc=desc, warps=r.warps, stages=1,
                                  divisible_ints=("K",))
        used = cubin_resources(compiled)
        shared = compiled.metadata.shared if used is None else used["shared"] + used["static_shared"]
        assert shared <= 232448, (k, n, pair, dtype, shared)


@pytest.mark.parametrize("above,columns", [(16384, 16), (8192, 16), (16384, 64)])
def test_split_launches_compile_within_an_sms_shared_memory(monkeypatch: pytest.MonkeyPatch, above: int,
                                                            columns: int) -> None:
    """sm_90 output (no GPU needed) of the split-K launches at the predictor's and the Talker's shapes in bf16, the
    Talker's down included: shared memory within 227 KB a block, every weight load before the PDL wait, the count
    taken with one acquire-release atomic at GPU scope, and the parts read back from L2 (not L1, which another SM's
    stores do not reach)."""
    from triton_mode import cubin_resources

    g = compiled_copy("gemv")
    monkeypatch.setattr(g, "MMA_SPLIT_ABOVE", above)
    monkeypatch.setattr(g, "MMA_COLUMNS", columns)
    shapes = [(1024, 4096, False), (2048, 1024, False), (1024, 3072, True), (3072, 1024, False),
              (2048, 4096, False), (2048, 2048, False), (2048, 6144, True), (6144, 2048, False)]
    split = [(k, n, pair) for k, n, pair in shapes if g.rows_tiles(n, k, pair).parts > 1]
    assert (6144, 2048, False) in split and (2048, 6144, True) in split and len(split) >= 5, split
    for k, n, pair in split:
        r = g.rows_tiles(n, k, pair)
        consts = dict(HAS_BIAS=False, ADD=not pair, PDL=1, SWIGLU=pair, SCALED=pair, BLOCK_M=g.MMA_ROWS,
                      BLOCK_N=r.block_n, BLOCK_K=r.block_k, SPLIT=r.split, UPCAST=False, PARTS=r.parts,
                      PART_VALUES=r.part_values)
        desc = {"part_ptr": "*fp32", "count_ptr": "*i32"}
        compiled = hopper_compile(g._gemv_rows_kernel, consts, desc=desc, warps=r.warps, stages=1,
                                  divisible_ints=("K",))
        used = cubin_resources(compiled)
        shared = compiled.metadata.shared if used is None else used["shared"] + used["static_shared"]
        assert shared <= 232448, (k, n, pair, shared)
        lines = compiled.asm["ptx"].splitlines()
        wait = next(i for i, line in enumerate(lines) if "griddepcontrol.wait" in line)
        weight_loads = [i for i, line in enumerate(lines) if "ld.global.v4" in line and ".cg" not in line]
        assert weight_loads and sum(i < wait for i in weight_loads) >= r.values // (8 * 32 * r.warps), (k, n)
        assert sum("atom.global.gpu.acq_rel.add" in line for line in lines) == 1, (k, n)
        assert any("ld.global.cg" in line for line in lines[wait:]), (k, n)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 5])
def test_both_lanes_tile_orders_take_the_same_sums(mod: ModuleType, monkeypatch: pytest.MonkeyPatch,
                                                   dtype: torch.dtype, rows: int) -> None:
    """The lanes kernel's tile with the columns second ([chunks, columns, lanes], what Triton 3.9 gives the warps)
    and first ([columns, chunks, lanes], Triton 3.6: lanes_columns_dim): each call (bias, residual add, gate|up with
    SwiGLU and the folded norm, the normed head) matches its reference, and the two orders give the same bits."""
    monkeypatch.setattr(mod, "LANES", True)
    monkeypatch.setattr(mod, "LANES_MAX_ROWS", mod.MAX_ROWS)
    k, n = 300, 70  # two chunks of 256, the second partly masked; a partial program of columns
    x, w, b = _inputs(rows, k, n, dtype, bias=True)
    gate_up = (torch.randn(2 * n, k, device=DEVICE) / k**0.5).to(dtype)
    residual = torch.randn(rows, n, device=DEVICE).to(dtype)
    calls = {"bias": (lambda: mod.gemv(x, w, b), lambda: mod.gemv_ref(x, w, b), TOL),
             "add": (lambda: mod.gemv_add_(residual.clone(), x, w), lambda: mod.gemv_add_ref(residual.clone(), x, w),
                     TOL),
             "swiglu": (lambda: mod.gemv_swiglu(x, gate_up, 1e-6, True), lambda: mod.gemv_swiglu_ref(x, gate_up, 1e-6,
                                                                                                     True), SWIGLU_TOL),
             "normed": (lambda: mod.gemv(x, w, norm_eps=1e-6), lambda: mod.gemv_ref(x, w, norm_eps=1e-6), TOL)}
    for name, (call, reference, tol) in calls.items():
        got = {}
        for columns in (1, 0):
            monkeypatch.setattr(mod, "lanes_columns_dim", lambda columns=columns: columns)
            got[columns] = call()
            torch.testing.assert_close(got[columns], reference(), **tol[dtype], msg=f"{name}, columns {columns}")
        assert torch.equal(got[0], got[1]), name


def test_the_lanes_rule_holds_whole_rows_within_a_threads_registers(monkeypatch: pytest.MonkeyPatch) -> None:
    """lanes_tiles at the 1.7B's shapes: 8 columns a program while that leaves >= 256 programs (4 for the
    predictor's o and down); a thread's weight values (8 a chunk of 256, twice with gate|up) at most 128 at one row
    and 64 at 2-16 rows, so the predictor's down (K 3,072 padded to 16 chunks) and the Talker's gate|up fit at one
    row only and the Talker's down (K 6,144) never. As shipped no call of 2-16 rows takes it (LANES_MAX_ROWS)."""
    from voxgate.kernels import gemv as g

    assert g.LANES_MAX_ROWS == 1 and not g.lanes_tiles(4096, 1024, rows=2).fits
    monkeypatch.setattr(g, "LANES_MAX_ROWS", g.MAX_ROWS)

    assert g.lanes_tiles(4096, 1024) == g.LanesTiles(8, 4, 512, 32)
    assert g.lanes_tiles(1024, 2048).block_n == 4 and g.lanes_tiles(1024, 3072).chunks == 16
    for k, n, pair, one, eight in [(1024, 4096, False, True, True), (2048, 1024, False, True, True),
                                   (1024, 3072, True, True, True), (3072, 1024, False, True, False),
                                   (2048, 4096, False, True, True), (2048, 6144, True, True, False),
                                   (6144, 2048, False, False, False)]:
        assert (g.lanes_tiles(n, k, pair, 1).fits, g.lanes_tiles(n, k, pair, 8).fits) == (one, eight), (k, n)
        assert g.fast(8, n, k, pair, lanes=True) == (eight or g.fast(8, n, k, pair)), (k, n)


@pytest.mark.parametrize("rows", [1, 8, 16])
def test_the_lanes_kernel_sums_each_row_within_a_warp(rows: int) -> None:
    """sm_90 output (no GPU needed) of every lanes launch that fits at the 1.7B's shapes (q|k|v with PDL, o and
    down added into the residual, gate|up with SwiGLU and the folded norm), with the column dimension
    lanes_columns_dim finds for this Triton (on an H100, Triton 3.6's order put the warps on K's chunks of a
    [chunks, columns, lanes] tile: 4-30x slower than the one-row kernel): the weight's layout gives each warp
    whole rows (warps on the columns, 8 contiguous values a lane), every weight load is a 16-byte vector before the
    PDL wait, each row's sums take 5 shuffles a column (and a gate|up column 10, x's squares 5 more), at most 8
    bytes of stack a thread (no registers spilled by the rows' loads), and the only barriers are the stores' (one
    a row: the outputs change layout to be stored)."""
    from triton_mode import cubin_resources

    g = compiled_copy("gemv")
    g.LANES_MAX_ROWS = g.MAX_ROWS  # (a copy of its own: every row count the kernel takes)
    columns = g.lanes_columns_dim()  # the tile's dimension Triton gives the warps (differs by Triton version)
    shapes = [(1024, 4096, False), (2048, 1024, False), (1024, 3072, True), (3072, 1024, False),
              (2048, 4096, False), (2048, 2048, False), (2048, 6144, True)]
    for k, n, pair in shapes:
        t = g.lanes_tiles(n, k, pair, rows)
        if not t.fits:
            continue
        consts = dict(HAS_BIAS=False, ADD=not pair, PDL=1, SWIGLU=pair, SCALED=pair, BLOCK_M=rows,
                      BLOCK_N=t.block_n, CHUNKS=t.chunks, LANE_K=g.LANE_K, COLS_DIM=columns)
        compiled = hopper_compile(g._gemv_lanes_kernel, consts, warps=t.block_n, stages=1, divisible_ints=("K",))
        ttgir, ptx = compiled.asm["ttgir"], compiled.asm["ptx"]
        warps = [1, 1, 1]
        warps[columns] = t.block_n
        weight_layout = f"sizePerThread = [1, 1, 8], threadsPerWarp = [1, 1, 32], warpsPerCTA = {warps}"
        assert weight_layout in ttgir, (k, n, rows)
        lines = ptx.splitlines()
        wait = next(i for i, line in enumerate(lines) if "griddepcontrol.wait" in line)
        vectors = [i for i, line in enumerate(lines) if "ld.global.v4" in line]
        assert sum(i < wait for i in vectors) >= t.values // 8, (k, n, rows)
        shuffles = 5 * rows * (3 if pair else 1)
        assert ptx.count("shfl.sync") == shuffles, (k, n, rows, ptx.count("shfl.sync"))
        assert ptx.count("bar.sync") <= 2 * rows, (k, n, rows, ptx.count("bar.sync"))
        used = cubin_resources(compiled)
        assert used is None or used["stack"] <= 8, (k, n, rows, used)  # (Triton 3.6: 8 at q|k|v, 8-16 rows)


# the 1.7B code predictor's projections (K, N): q|k|v, o, gate|up, down, a codebook's head; the Talker's down
REAL = [(1024, 4096), (2048, 1024), (1024, 6144), (3072, 1024), (1024, 2048), (6144, 2048)]


@pytest.mark.gpu
@pytest.mark.skipif(DEVICE != "cuda", reason="the real shapes need a GPU (seconds each interpreted)")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 2, 8, 16])
@pytest.mark.parametrize("k,n", REAL)
@pytest.mark.parametrize("lanes", [False, True], ids=["tiles", "lanes"])
def test_gemv_at_the_predictors_shapes(mod: ModuleType, monkeypatch: pytest.MonkeyPatch, dtype: torch.dtype,
                                       rows: int, k: int, n: int, lanes: bool) -> None:
    """On the GPU, bf16 rounds to nearest on both sides: within one bf16 step of cuBLAS (2e-2 covers it); with PDL
    (where the GPU has it) the same bits; normed (norm_eps) within the same of cuBLAS then rms_scaled. `lanes`: the
    lanes kernel wherever it fits (gemv_layout = lanes)."""
    from voxgate.kernels.utils import pdl_available

    monkeypatch.setattr(mod, "LANES", lanes)
    monkeypatch.setattr(mod, "LANES_MAX_ROWS", mod.MAX_ROWS)  # at every row count (the engine: one row)

    x, w, b = _inputs(rows, k, n, dtype, bias=k == 2048)
    got = mod.gemv(x, w, b)
    _assert_close(got, mod.gemv_ref(x, w, b), dtype)
    assert torch.equal(mod.gemv(x, w, b), got)
    if pdl_available(torch.device("cuda")):
        assert torch.equal(mod.gemv(x, w, b, pdl=True), got) and torch.equal(mod.gemv(x, w, b, pdl="late"), got)
    residual = torch.randn(rows, n, device=DEVICE).to(dtype)
    _assert_close(mod.gemv_add_(residual.clone(), x, w), mod.gemv_add_ref(residual.clone(), x, w), dtype)
    xs = (x.float() * 3).to(dtype)  # normed (a head of a folded stack): 1 / RMS far from 1
    _assert_close(mod.gemv(xs, w, norm_eps=1e-6, pdl=True), mod.gemv_ref(xs, w, norm_eps=1e-6), dtype)


@pytest.mark.gpu
@pytest.mark.skipif(DEVICE != "cuda", reason="the real shapes need a GPU (seconds each interpreted)")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [2, 8, 16])
@pytest.mark.parametrize("above", [16384, 8192])
@pytest.mark.parametrize("k,n", REAL)
def test_split_k_at_the_predictors_shapes(mod: ModuleType, monkeypatch: pytest.MonkeyPatch, dtype: torch.dtype,
                                          rows: int, above: int, k: int, n: int) -> None:
    """K cut across programs on the GPU (every SM's parts, the last program adding them): within one bf16 step of
    cuBLAS, added into a residual and as gate|up with the folded norm too, the same bits on every call and with
    PDL, and every count back at zero."""
    from voxgate.kernels.utils import pdl_available

    monkeypatch.setattr(mod, "MMA_SPLIT_ABOVE", above)
    x, w, b = _inputs(rows, k, n, dtype, bias=k == 2048)
    got = mod.gemv(x, w, b)
    _assert_close(got, mod.gemv_ref(x, w, b), dtype)
    for _ in range(3):
        assert torch.equal(mod.gemv(x, w, b), got)
    if pdl_available(torch.device("cuda")):
        assert torch.equal(mod.gemv(x, w, b, pdl=True), got)
    residual = torch.randn(rows, n, device=DEVICE).to(dtype)
    _assert_close(mod.gemv_add_(residual.clone(), x, w), mod.gemv_add_ref(residual.clone(), x, w), dtype)
    if n % 2 == 0:
        xs = (x.float() * 3).to(dtype)
        torch.testing.assert_close(mod.gemv_swiglu(xs, w, 1e-6, True, pdl=True).float(),
                                   mod.gemv_swiglu_ref(xs, w, 1e-6, True).float(), **SWIGLU_TOL[dtype])
    torch.cuda.synchronize()
    assert all(not s.counts.any() for s in mod._SCRATCH.values())


@pytest.mark.gpu
@pytest.mark.skipif(DEVICE != "cuda", reason="needs a CUDA GPU")
@pytest.mark.parametrize("rows", [1, 8])
@pytest.mark.parametrize("mode", [True, "late", "split"], ids=["pdl", "pdl-late", "pdl-split-k"])
def test_a_chain_of_gemvs_captures_in_a_cuda_graph(mod: ModuleType, monkeypatch: pytest.MonkeyPatch,
                                                   mode: bool | str, rows: int) -> None:
    """No host sync and no tuning: a chain of dependent projections (each reads the one before; residual adds in
    place) captures, with PDL where the GPU has it, and its replays follow new inputs bit for bit with eager calls
    without PDL. A kernel that read its input before the one ahead finished would break the chain's bits. `split`:
    K cut across programs at 8 rows (each program's parts, counts and the last program's sums inside the graph)."""
    from voxgate.kernels.utils import pdl_available

    if mode == "split":
        monkeypatch.setattr(mod, "MMA_SPLIT_ABOVE", 8192)
        mode = True
    pdl = mode if pdl_available(torch.device("cuda")) else False
    h, inner = 1024, 3072
    ws = [(torch.randn(inner, h, device=DEVICE) / h**0.5).to(torch.bfloat16) for _ in range(6)]
    ds = [(torch.randn(h, inner, device=DEVICE) / inner**0.5).to(torch.bfloat16) for _ in range(6)]
    x = torch.randn(rows, h, device=DEVICE).to(torch.bfloat16)

    def chain(use_pdl: bool) -> torch.Tensor:
        res = x.clone()
        for w, d in zip(ws, ds, strict=True):
            mod.gemv_add_(res, mod.gemv(res, w, pdl=use_pdl), d, pdl=use_pdl)
        return res

    chain(pdl)  # compiled before the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = chain(pdl)
    for _ in range(3):
        x.copy_(torch.randn_like(x))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, chain(False))

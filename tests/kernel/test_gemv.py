"""kernels/gemv.py (a projection of 1-16 rows, split over K where the columns give too few programs) against
F.linear on fresh random inputs (Triton's interpreter without a GPU, compiled on CUDA)."""

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
# (K, N) interpreted: neither a multiple of the tiles below (16 x 32) nor of the rule's BLOCK_K (64)
SMALL = [(100, 50), (200, 70)]
# (BLOCK_N, BLOCK_K, split): several column tiles and K steps; split 1 and 3 (the last range short)
LAUNCHES = [(16, 32, 1), (16, 32, 3), (32, 16, 2)]


@pytest.fixture(scope="module")
def mod() -> ModuleType:
    return kernel_module("gemv")


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
@pytest.mark.parametrize("launch", LAUNCHES, ids=lambda t: "n{}-k{}-split{}".format(*t))
def test_gemv_matches_linear(mod: ModuleType, dtype: torch.dtype, rows: int, k: int, n: int,
                             launch: tuple[int, int, int]) -> None:
    x, w, _ = _inputs(rows, k, n, dtype)
    _assert_close(mod.gemv(x, w, launch=mod.Tiles(*launch)), mod.gemv_ref(x, w), dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 16])
def test_gemv_by_its_own_rule_with_bias(mod: ModuleType, dtype: torch.dtype, rows: int) -> None:
    """The rule's tiles (split over K at 1 row, 128 columns at a time) and the bias added before the rounding."""
    k, n = 200, 70
    assert mod.tiles(rows, n, k).split > 1
    x, w, b = _inputs(rows, k, n, dtype, bias=True)
    _assert_close(mod.gemv(x, w, b), mod.gemv_ref(x, w, b), dtype)
    _assert_close(mod.gemv(x, w, b, launch=mod.Tiles(32, 64, 1)), mod.gemv_ref(x, w, b), dtype)


def test_split_and_unsplit_agree_and_repeat_bitwise(mod: ModuleType) -> None:
    """fp32: the split's partial sums add up to the unsplit sum up to the order of the additions; each path gives
    the same bits every call (no atomics)."""
    x, w, _ = _inputs(3, 200, 70, torch.float32)
    whole, split = mod.Tiles(16, 32, 1), mod.Tiles(16, 32, 4)
    a, b = mod.gemv(x, w, launch=whole), mod.gemv(x, w, launch=split)
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    assert torch.equal(mod.gemv(x, w, launch=split), b) and torch.equal(mod.gemv(x, w, launch=whole), a)


def test_the_rule_fills_the_gpu_and_covers_k() -> None:
    """The rule (host side only): BLOCK_N shrinks as rows grow, split brings the programs up towards the target
    without an empty K range, and nothing splits where the columns alone give enough programs."""
    from voxgate.kernels.gemv import TARGET_PROGRAMS, tiles

    for rows in (1, 2, 3, 8, 16):
        for k, n in [(1024, 4096), (2048, 1024), (1024, 6144), (3072, 1024), (1024, 2048), (100, 50)]:
            t = tiles(rows, n, k)
            programs = -(-n // t.block_n)
            steps = -(-k // t.block_k)
            per_split = -(-steps // t.split)
            assert 1 <= t.split <= steps and (t.split - 1) * per_split < steps, (rows, k, n, t)
            assert programs * t.split <= max(TARGET_PROGRAMS, programs), (rows, k, n, t)
            if programs >= TARGET_PROGRAMS:
                assert t.split == 1
    assert tiles(1, 1024, 3072) == tiles(1, 1024, 3072)
    assert tiles(1, 1024, 3072).split > tiles(16, 1024, 3072).split > 1
    assert tiles(1, 4096, 1024).block_n > tiles(16, 4096, 1024).block_n


def test_gemv_refuses_bad_shapes(mod: ModuleType) -> None:
    x = torch.randn(2, 8, device=DEVICE)
    with pytest.raises(AssertionError):
        mod.gemv(x, torch.randn(4, 6, device=DEVICE))
    with pytest.raises(AssertionError, match="at most 16 rows"):
        mod.gemv(torch.randn(17, 8, device=DEVICE), torch.randn(4, 8, device=DEVICE))
    with pytest.raises(AssertionError):
        mod.gemv(x, torch.randn(4, 8, device=DEVICE), torch.randn(3, device=DEVICE))
    assert mod.gemv(torch.randn(0, 8, device=DEVICE), torch.randn(4, 8, device=DEVICE)).shape == (0, 4)


def _loop_body(ptx: str) -> str:
    """The PTX of the kernel's K loop: from its header label to the branch back to it."""
    lines = ptx.splitlines()
    start = next(i for i, line in enumerate(lines) if "Inner Loop Header" in line)
    label = lines[start].split(":")[0].strip()
    end = next(i for i in range(start + 1, len(lines)) if "bra" in lines[i] and label in lines[i])
    return "\n".join(lines[start:end])


@pytest.mark.parametrize("rows", [1, 16])
def test_the_k_loop_streams_whole_vectors_and_reduces_after_it(rows: int) -> None:
    """The compiler's sm_90 output (no GPU needed) at the rule's tiles: the weight arrives in vector loads (16
    bytes a thread at 1 row, 8 at 16 rows, where a tile is 4 values a thread), and the loop holds FMAs into
    per-thread partial sums with no warp shuffle (a reduction inside the loop cost 384 shuffles and ~2,100 PTX
    lines a step; after it, ~130-330). Without the K and k_per_split divisibility Triton sees at run time, the
    loads would be 2-byte scalars."""
    g = compiled_copy("gemv")
    t = g.tiles(rows, 4096, 1024)
    consts = dict(HAS_BIAS=False, SPLIT=False, BLOCK_M=g.triton.next_power_of_2(rows), BLOCK_N=t.block_n,
                  BLOCK_K=t.block_k)
    kernel = hopper_compile(g._gemv_kernel, consts, warps=t.warps, stages=3, divisible_ints=("K", "k_per_split"))
    loop = _loop_body(kernel.asm["ptx"])
    assert ("ld.global.v4.b32" if rows == 1 else "ld.global.v2.b32") in loop and "fma.rn.f32" in loop
    assert "ld.global.b16" not in loop.replace("ld.global.b16", "", 1)  # at most one scalar: x's at 1 row
    assert "shfl" not in loop


# the 1.7B code predictor's projections (K, N): q|k|v, o, gate|up, down, a codebook's head
REAL = [(1024, 4096), (2048, 1024), (1024, 6144), (3072, 1024), (1024, 2048)]


@pytest.mark.gpu
@pytest.mark.skipif(DEVICE != "cuda", reason="the real shapes need a GPU (seconds each interpreted)")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 2, 8, 16])
@pytest.mark.parametrize("k,n", REAL)
def test_gemv_at_the_predictors_shapes(mod: ModuleType, dtype: torch.dtype, rows: int, k: int, n: int) -> None:
    """On the GPU, bf16 rounds to nearest on both sides: within one bf16 step of cuBLAS (2e-2 covers it)."""
    x, w, b = _inputs(rows, k, n, dtype, bias=k == 2048)
    got = mod.gemv(x, w, b)
    _assert_close(got, mod.gemv_ref(x, w, b), dtype)
    assert torch.equal(mod.gemv(x, w, b), got)


@pytest.mark.gpu
@pytest.mark.skipif(DEVICE != "cuda", reason="needs a CUDA GPU")
def test_gemv_captures_in_a_cuda_graph(mod: ModuleType) -> None:
    """No host sync and no tuning: the split path (two launches, a workspace) captures, and replays follow new
    inputs bit for bit with the eager call."""
    x, w, b = _inputs(1, 3072, 1024, torch.bfloat16, bias=True)
    assert mod.tiles(1, 1024, 3072).split > 1
    mod.gemv(x, w, b)  # compiled before the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = mod.gemv(x, w, b)
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, mod.gemv(x, w, b))

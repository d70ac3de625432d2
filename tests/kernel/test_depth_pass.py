"""kernels/depth_pass.py (a depth pass's layers in one persistent launch) against its PyTorch reference on fresh
random inputs: the one-phase-a-launch form in Triton's interpreter at tiny shapes, and on CUDA (`gpu`) the single
launch with its grid barrier at the 1.7B predictor's shapes, also replayed from a CUDA graph."""

from __future__ import annotations

from types import ModuleType

import pytest
import torch

pytest.importorskip("triton")

from kernel_cases import DEPTH_TOL
from triton_mode import DEVICE, kernel_module

pytestmark = pytest.mark.usefixtures("no_tf32")

# DEPTH_TOL's, bf16 a little looser: a pass chains 5 layers of them (a one-step rounding flip in one layer moves
# the next layers' inputs)
PASS_TOL = {torch.float32: DEPTH_TOL[torch.float32], torch.bfloat16: dict(rtol=6e-2, atol=6e-2)}
TINY = dict(layers=2, hidden=32, inner=64, heads=4, kv_heads=2, d=16)  # the tiny checkpoint's predictor
REAL = dict(layers=5, hidden=1024, inner=3072, heads=16, kv_heads=8, d=128)  # the 1.7B's


@pytest.fixture(scope="module")
def depth() -> ModuleType:
    return kernel_module("depth_pass")


def _pass_inputs(rows: int, dtype: torch.dtype, layers: int, hidden: int, inner: int, heads: int, kv_heads: int,
                 d: int, positions: int = 16) -> tuple:
    from voxgate.engine.qwen3tts.model.layers import rope_tables

    def mat(n: int, k: int) -> torch.Tensor:
        return (torch.randn(layers, n, k, device=DEVICE) / k**0.5).to(dtype)

    def gain(n: int) -> torch.Tensor:
        return (1 + 0.1 * torch.randn(layers, n, device=DEVICE)).to(dtype)

    weights = (gain(hidden), mat((heads + 2 * kv_heads) * d, hidden), gain(d), gain(d), mat(hidden, heads * d),
               gain(hidden), mat(2 * inner, hidden), mat(hidden, inner))
    x = (2 * torch.randn(rows, hidden, device=DEVICE)).to(dtype)
    # the depth loop's store: earlier positions hold keys and values already, later ones garbage; rows shuffled
    store = torch.randn(layers, 2, rows + 2, kv_heads, positions, d, device=DEVICE).to(dtype)
    slots = torch.randperm(rows + 2, device=DEVICE)[:rows]
    pos = torch.randint(0, positions, (rows,), device=DEVICE)
    cos, sin = rope_tables(torch.arange(positions, device=DEVICE), d, 1e6, dtype)
    return x, weights, store, slots, pos, cos, sin, heads, kv_heads, 1e-6


def _compare(depth: ModuleType, args: tuple, dtype: torch.dtype, **kwargs: object) -> torch.Tensor:
    x, weights, store, *rest = args
    want_store = store.clone()
    want = depth.depth_pass_ref(x, weights, want_store, *rest)
    got = depth.depth_pass(x, weights, store, *rest, **kwargs)
    assert got.shape == want.shape and got.dtype == want.dtype
    torch.testing.assert_close(store.float(), want_store.float(), **PASS_TOL[dtype])
    torch.testing.assert_close(got.float(), want.float(), **PASS_TOL[dtype])
    return got


@pytest.mark.parametrize("dtype,rows,seed", [(torch.float32, 1, 1), (torch.float32, 3, 2), (torch.float32, 8, 3),
                                             (torch.bfloat16, 1, 4), (torch.bfloat16, 3, 5),
                                             (torch.bfloat16, 8, 6)])
def test_one_phase_a_launch_equals_the_reference(depth: ModuleType, dtype: torch.dtype, rows: int,
                                                 seed: int) -> None:
    torch.manual_seed(seed)
    _compare(depth, _pass_inputs(rows, dtype, **TINY), dtype, one_phase=True)


def test_depth_pass_refuses_bad_shapes(depth: ModuleType) -> None:
    x, weights, store, *rest = _pass_inputs(17, torch.float32, **TINY)  # one row over the MMA block
    with pytest.raises(AssertionError):
        depth.depth_pass(x, weights, store, *rest)
    x, weights, store, *rest = _pass_inputs(2, torch.float32, **TINY)
    with pytest.raises(AssertionError):  # a store of one KV head where the weights have two
        depth.depth_pass(x, weights, store[:, :, :, :1].contiguous(), *rest)


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="with a GPU the barrier itself runs (the gpu test below)")
@pytest.mark.parametrize("timed", [False, True])
def test_the_single_launch_compiles_for_hopper_with_its_barriers(timed: bool) -> None:
    """Without a GPU: the one-launch form at the 1.7B's shapes compiles for sm_90 (bf16), and its PTX holds the
    barrier as meant: per barrier one release add by one thread, a volatile spin, one acquire load; 4 a layer and
    one between layers (5 in the loop's body), and the exit's add and compare-and-swap; and the L2 prefetch of
    the next phase's weights; timed (TIMES), both clocks read at each of a phase's 3 stamps, and none otherwise;
    and (cuobjdump on the cubin, where Triton carries it) a CTA that fits an SM with no register spills.
    The CPU's stand-in for running the barrier: the PTX spelling is Triton's (3.9 here; the H200's 3.6 spells it
    otherwise), and where CUDA exists the gpu test runs the barrier for real instead."""
    import inspect
    import re
    import warnings

    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton_mode import compiled_copy, cubin_resources

    fn = compiled_copy("depth_pass")._depth_pass_kernel
    consts = dict(H=1024, INNER=3072, HQ=16, HKV=8, D=128, BLOCK_G=2, BLOCK_P=16, BLOCK_M=16, BN_QKV=32, BN_H=16,
                  BN_I=32, BK=128, DOT_DTYPE=tl.bfloat16, PRECISION=None, SYNC=True, LAYERS=5, PREFETCH=True,
                  LINE=64, LINES_H=16, LINES_HO=32, LINES_I=64, TIMES=timed, **({} if timed else {"times_ptr": None}))
    params = list(inspect.signature(fn.fn).parameters)
    types = {"pos_ptr": "*i64", "slots_ptr": "*i64", "bar_ptr": "*i32", "times_ptr": "*i64", "eps": "fp32",
             "qk_scale": "fp32"}
    sig = {p: "constexpr" if p in consts else types.get(p) or ("*bf16" if p.endswith(("_ptr", "_w")) else "i32")
           for p in params}
    attrs = {(params.index(p),): [["tt.divisibility", 16]] for p in params if sig[p].startswith("*")}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="TRITON_DEFAULT_FP_FUSION")
        compiled = triton.compile(ASTSource(fn, sig, consts, attrs), target=GPUTarget("cuda", 90, 32),
                                  options={"num_warps": 4})
    ptx = compiled.asm["ptx"]
    # the grid barrier needs every CTA resident at once, one an SM: its registers and shared memory must fit an
    # SM's (64 K registers, 227 KB), and a spill (stack) would slow every phase
    used = cubin_resources(compiled)
    if used is not None:
        assert used["registers"] * 32 * 4 <= 65536 and used["static_shared"] + used["shared"] <= 227 * 1024, used
        assert used["stack"] == 0, used
    release = re.findall(r"@%p\d+ red\.global\.gpu\.release\.add\.u32", ptx)
    acquire = re.findall(r"@%p\d+ ld\.global\.gpu\.acquire\.b32", ptx)
    assert len(release) == len(acquire) == 5, (len(release), len(acquire))
    assert len(re.findall(r"ld\.volatile\.global\.b32", ptx)) == 10  # before each spin loop, and in it
    assert len(re.findall(r"atom\.global\.relaxed\.gpu\.cas\.b32", ptx)) == 1
    assert "mma.sync" in ptx
    # the L2 prefetch, not dropped as dead code: each of a CTA's 128 threads takes its share of the lines of a tile
    # of o (16 x 32 lines), gate and up (32 x 16 each), down (16 x 64) and the next q|k|v (32 x 16)
    prefetches = re.findall(r"prefetch\.global\.L2 \[%rd\d+\]", ptx)
    assert len(prefetches) == (16 * 32 + 2 * 32 * 16 + 16 * 64 + 32 * 16) // 128, len(prefetches)
    stamps = 5 * 3 if timed else 0  # in the layer loop's body
    assert len(re.findall(r"mov\.u64 \S+, %globaltimer", ptx)) == stamps
    assert len(re.findall(r"mov\.u64 \S+, %clock64", ptx)) == stamps


@pytest.mark.gpu
@pytest.mark.skipif(DEVICE != "cuda", reason="needs a CUDA GPU: the grid barrier cannot run interpreted")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 8, 16])
def test_single_launch_at_the_real_shapes(depth: ModuleType, dtype: torch.dtype, rows: int) -> None:
    """One launch for the pass against the reference and against one phase a launch (the same tiles: a barrier
    that let a CTA read stale data would show as far more than a rounding); without the L2 prefetch, bit for bit;
    and replayed from a CUDA graph three times, bit for bit (the counter is back at zero after each launch, or a
    replay would not wait)."""
    args = _pass_inputs(rows, dtype, **REAL)
    x, weights, store, *rest = args
    store_before = store.clone()
    got = _compare(depth, args, dtype, one_phase=False)
    split_store = store_before.clone()
    split = depth.depth_pass(x, weights, split_store, *rest, one_phase=True)
    torch.testing.assert_close(got.float(), split.float(), **PASS_TOL[dtype])
    torch.testing.assert_close(store.float(), split_store.float(), **PASS_TOL[dtype])
    assert int(depth.barrier(x.device).item()) == 0
    plain_store = store_before.clone()  # the prefetch is only a hint: without it, the same bits
    plain = depth.depth_pass(x, weights, plain_store, *rest, one_phase=False, prefetch=False)
    assert torch.equal(plain, got) and torch.equal(plain_store, store)
    graph_store = store_before.clone()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        depth.depth_pass(x, weights, graph_store, *rest, one_phase=False)  # warm-up: compiled before capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        replayed = depth.depth_pass(x, weights, graph_store, *rest, one_phase=False)
    for _ in range(3):
        graph_store.copy_(store_before)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(replayed, got) and torch.equal(graph_store, store)


@pytest.mark.gpu
@pytest.mark.skipif(DEVICE != "cuda", reason="needs a CUDA GPU: the grid barrier cannot run interpreted")
def test_clock_stamps_change_nothing_and_are_in_order(depth: ModuleType) -> None:
    """The timed launch (TIMES) gives the untimed one's bits; each program's stamps run forward (a phase's start,
    its prologue's end, its tiles' end, the next phase's start), and every program's start of a phase comes after
    every program's end of the one before (the barrier between them)."""
    args = _pass_inputs(8, torch.bfloat16, **REAL)
    x, weights, store, *rest = args
    store_before = store.clone()
    plain = depth.depth_pass(x, weights, store, *rest, one_phase=False)
    times = torch.zeros(depth.programs(x, weights, REAL["heads"], REAL["kv_heads"]), REAL["layers"], depth.PHASES,
                        3, 2, dtype=torch.int64, device=DEVICE)
    timed_store = store_before.clone()
    timed = depth.depth_pass(x, weights, timed_store, *rest, one_phase=False, times=times)
    assert torch.equal(timed, plain) and torch.equal(timed_store, store)
    for clock in range(2):
        stamps = times[..., clock].flatten(1)  # [programs, layers * phases * 3], in program order
        assert bool((stamps.diff(dim=1) >= 0).all()), f"clock {clock}: a program's stamps go back"
    ns = times[..., 0].flatten(1, 2)  # [programs, layers * phases, 3]
    assert bool((ns[:, 1:, 0].amin(0) >= ns[:, :-1, 2].amax(0)).all()), "a phase started before the last one ended"

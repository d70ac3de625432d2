"""kernels/causal_conv.py against PyTorch: the implicit-GEMM conv with pool-held history, its epilogues, the
transposed-conv form, and the window advance (TRITON_INTERPRET=1 without a GPU)."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from types import ModuleType

import pytest
import torch
import torch.nn.functional as F

from .triton_mode import DEVICE, kernel_module

pytest.importorskip("triton")
pytestmark = pytest.mark.usefixtures("no_tf32")  # the oracles are torch convs in fp32


@pytest.fixture(scope="module")
def cc() -> ModuleType:
    return kernel_module("causal_conv")


def _snake(c: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    return (torch.rand(c, generator=g) + 0.5).to(DEVICE), (torch.rand(c, generator=g) + 0.5).to(DEVICE)


def _pool(slots: int, hist: int, c: int, g: torch.Generator, dtype: torch.dtype, pad: int = 13) -> torch.Tensor:
    """A [slots, hist, c] view with a slot stride larger than its rows (like a SlotPool view)."""
    buf = torch.randn(slots, hist * c + pad, generator=g).to(dtype).to(DEVICE)
    return buf[:, : hist * c].view(slots, hist, c)


@pytest.mark.slow
@pytest.mark.parametrize(("cin", "n", "taps", "dil", "length"), [
    (32, 48, 7, 1, 5), (16, 40, 7, 3, 9), (64, 16, 3, 1, 1), (24, 20, 7, 9, 30), (32, 32, 2, 1, 4),
])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_conv_matches_torch_conv1d(cc: ModuleType, cin: int, n: int, taps: int, dil: int, length: int,
                                   dtype: torch.dtype) -> None:
    """History rows read from a pool view (slot stride larger than its rows), a sink row, odd Cin and N."""
    g = torch.Generator().manual_seed(cin * 100 + length)
    b, hist = 3, (taps - 1) * dil
    x = torch.randn(b, length, cin, generator=g).to(dtype).to(DEVICE)
    w = (torch.randn(n, cin, taps, generator=g) / (cin * taps) ** 0.5).to(dtype).to(DEVICE)
    bias = torch.randn(n, generator=g).to(dtype).to(DEVICE)
    state = _pool(5, hist, cin, g, dtype)
    slots = torch.tensor([3, 0, 1], device=DEVICE)
    got, _ = cc.causal_conv(x, cc.conv_weight(w), taps, dil, state=state, slots=slots, bias=bias)
    # Independent oracle: torch's conv over the concatenated history, in fp32.
    full = torch.cat([state[slots], x], 1).float().transpose(1, 2)
    want = F.conv1d(full, w.float(), bias.float(), dilation=dil).transpose(1, 2)
    tol = 1e-4 if dtype == torch.float32 else 3e-2
    torch.testing.assert_close(got.float(), want, atol=tol, rtol=tol)


def _epilogue_kwargs(epilogue: str, b: int, length: int, cin: int, n: int, taps: int, dil: int,
                     g: torch.Generator, dtype: torch.dtype) -> dict:
    """causal_conv's keyword arguments for one epilogue case: history in a pool, bias, and the epilogue's parts."""
    kw: dict = dict(state=_pool(3, (taps - 1) * dil, cin, g, dtype), slots=torch.tensor([2, 1], device=DEVICE),
                    bias=torch.randn(n, generator=g).to(dtype).to(DEVICE))
    if epilogue == "snake_main":
        kw["snake_main"] = _snake(n, g)
    elif epilogue == "residual_out2":
        kw.update(residual=torch.randn(b, length, n, generator=g).to(dtype).to(DEVICE), snake_out2=_snake(n, g))
    elif epilogue == "clamp_fp32":
        kw.update(clamp=True, out_dtype=torch.float32)
    else:
        kw.update(store_main=False, snake_out2=_snake(n, g))
    return kw


def _assert_outputs_close(got: tuple, want: tuple, dtype: torch.dtype) -> None:
    tol = 1e-4 if dtype == torch.float32 else 5e-2
    for gt, wt in zip(got, want, strict=True):
        assert (gt is None) == (wt is None)
        if gt is not None:
            assert gt.dtype == wt.dtype and gt.shape == wt.shape
            torch.testing.assert_close(gt.float(), wt.float(), atol=tol, rtol=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("epilogue", ["snake_main", "residual_out2", "clamp_fp32", "out2_only"])
def test_epilogues_match_reference(cc: ModuleType, dtype: torch.dtype, epilogue: str) -> None:
    g = torch.Generator().manual_seed(7)
    b, length, cin, n, taps, dil = 2, 11, 32, 24, 7, 3
    x = (2 * torch.randn(b, length, cin, generator=g)).to(dtype).to(DEVICE)
    w = (torch.randn(n, cin, taps, generator=g) / 8).to(dtype).to(DEVICE)
    kw = _epilogue_kwargs(epilogue, b, length, cin, n, taps, dil, g, dtype)
    got = cc.causal_conv(x, cc.conv_weight(w), taps, dil, **kw)
    _assert_outputs_close(got, cc.causal_conv_ref(x, cc.conv_weight(w), taps, dil, **kw), dtype)
    if epilogue == "clamp_fp32":
        assert got[0].abs().max() <= 1.0 and (got[0].abs() == 1.0).any()


@pytest.mark.parametrize("stride", [2, 3, 5])
def test_transposed_conv_form_matches_conv_transpose1d(cc: ModuleType, stride: int) -> None:
    """k = 2s causal ConvTranspose1d (full output, last s samples dropped) over [carried frame | new frames]."""
    g = torch.Generator().manual_seed(stride)
    b, length, cin, cout = 2, 6, 16, 8
    x = torch.randn(b, length, cin, generator=g).to(DEVICE)
    w = torch.randn(cin, cout, 2 * stride, generator=g).to(DEVICE)
    bias = torch.randn(cout, generator=g).to(DEVICE)
    state = _pool(3, 1, cin, g, torch.float32)
    slots = torch.tensor([1, 2], device=DEVICE)
    act = _snake(cout, g)  # the next SnakeBeta, per output channel (columns r*Cout + o repeat them)
    got, got2 = cc.causal_conv(x, cc.convt_weight(w, stride), 2, state=state, slots=slots, bias=bias.repeat(stride),
                               snake_out2=act)
    got, got2 = got.view(b, length * stride, cout), got2.view(b, length * stride, cout)
    full = torch.cat([state[slots], x], 1).transpose(1, 2)
    y = F.conv_transpose1d(full, w, bias, stride=stride)[..., : (length + 1) * stride]  # causal trim
    want = y[..., stride:].transpose(1, 2)  # the carried frame's own samples were emitted last step
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(got2, want + act[1] * torch.sin(want * act[0]) ** 2, atol=1e-4, rtol=1e-4)


def test_one_tap_conv_without_state(cc: ModuleType) -> None:
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 9, 24, generator=g).to(DEVICE)
    w = torch.randn(40, 24, 1, generator=g).to(DEVICE)
    res = torch.randn(2, 9, 40, generator=g).to(DEVICE)
    got, _ = cc.causal_conv(x, cc.conv_weight(w), 1, residual=res)
    torch.testing.assert_close(got, res + x @ w[:, :, 0].T, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(("hist", "rate"), [(6, 1), (54, 4), (1, 1), (2, 8)])
def test_advance_state_takes_each_rows_own_end(cc: ModuleType, hist: int, rate: int) -> None:
    g = torch.Generator().manual_seed(hist)
    b, frames, c = 4, 5, 20
    x = torch.randn(b, frames * rate, c, generator=g).to(DEVICE)
    state = _pool(6, hist, c, g, torch.float32)
    slots = torch.tensor([4, 0, 2, 0], device=DEVICE)  # two padding rows on the sink
    n = torch.tensor([5, 0, 1, 0], device=DEVICE)
    want = state.clone()
    cc.advance_state_ref(x, want, slots, n, rate)
    untouched = state[[1, 3, 5]].clone()
    cc.advance_state(x, state, slots, n, rate)
    torch.testing.assert_close(state, want, atol=0, rtol=0)
    torch.testing.assert_close(state[[1, 3, 5]], untouched, atol=0, rtol=0)


def test_streamed_conv_equals_whole_conv(cc: ModuleType) -> None:
    """Chunks of a signal through conv + advance equal one conv over the zero-padded whole (the codec's use)."""
    g = torch.Generator().manual_seed(11)
    cin, n, taps, dil, rate = 16, 24, 7, 9, 3
    sig = torch.randn(1, 40 * rate, cin, generator=g).to(DEVICE)
    w = torch.randn(n, cin, taps, generator=g).to(DEVICE)
    state = torch.zeros(2, (taps - 1) * dil, cin, device=DEVICE)
    slots = torch.tensor([1], device=DEVICE)
    outs, start = [], 0
    for frames in [1, 3, 4, 16, 2, 14]:
        chunk = sig[:, start: start + frames * rate].contiguous()
        outs.append(cc.causal_conv(chunk, cc.conv_weight(w), taps, dil, state=state, slots=slots)[0])
        cc.advance_state(chunk, state, slots, torch.tensor([frames], device=DEVICE), rate)
        start += frames * rate
    want = F.conv1d(F.pad(sig.transpose(1, 2), ((taps - 1) * dil, 0)), w, dilation=dil).transpose(1, 2)
    torch.testing.assert_close(torch.cat(outs, 1), want, atol=1e-4, rtol=1e-4)


def _compiled_kernels(name: str) -> ModuleType:
    """A compiled-mode copy of kernels/<name>.py (the fixtures' copies may be the interpreter's); conv_tma is
    bound to a compiled copy of causal_conv while it is loaded."""
    import importlib.util
    import sys
    from pathlib import Path

    import voxgate.kernels

    def load(mod_name: str) -> ModuleType:
        path = Path(voxgate.kernels.__file__).parent / f"{mod_name}.py"
        spec = importlib.util.spec_from_file_location(f"voxgate.kernels._{mod_name}_compiled", path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod  # dataclasses look their module up while the class body runs
        spec.loader.exec_module(mod)
        return mod

    conv = load("causal_conv")
    if name == "causal_conv":
        return conv
    key = "voxgate.kernels.causal_conv"
    old = sys.modules.get(key)
    sys.modules[key] = conv
    try:
        return load(name)
    finally:
        if old is None:
            del sys.modules[key]
        else:
            sys.modules[key] = old


def _hopper_compile(fn: object, consts: dict, desc: dict[str, str] | None = None, warps: int = 4,
                    stages: int = 4) -> object:
    """Compile a conv kernel for sm_90 here (no GPU needed) with the runtime's alignment facts: 16-byte aligned
    tensors and the sizes divisible by 16; `desc` gives the tensor descriptors' types."""
    import inspect
    import warnings

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    params = list(inspect.signature(fn.fn).parameters)
    f32 = {"a1_ptr", "ib1_ptr", "a2_ptr", "ib2_ptr"}
    sig = {p: "constexpr" if p in consts else (desc or {}).get(p) or ("*i64" if p == "slots_ptr" else "*fp32"
           if p in f32 else "*bf16" if p.endswith("_ptr") else "i64" if p == "st_ss" else "i32")
           for p in params}
    divisible = [p for p in params if p.endswith("_ptr")] + [
        p for p in ("M", "L", "CIN", "N", "st_ss", "st_st") if p in params]
    attrs = {(params.index(p),): [["tt.divisibility", 16]] for p in divisible}
    with warnings.catch_warnings():  # triton 3.9 announces a future default (FP fusion) on every compile
        warnings.filterwarnings("ignore", message="TRITON_DEFAULT_FP_FUSION")
        return triton.compile(ASTSource(fn, sig, consts, attrs), target=GPUTarget("cuda", 90, 32),
                              options={"num_warps": warps, "num_stages": stages})


def _hopper_ptx(fast_sin: bool) -> str:
    """The pointer kernel's PTX for sm_90."""
    fn = _compiled_kernels("causal_conv")._causal_conv_kernel
    consts = dict(TAPS=7, HAS_STATE=True, HAS_BIAS=True, SNAKE_MAIN=True, HAS_RES=False, CLAMP=False,
                  STORE_MAIN=True, HAS_OUT2=False, FAST_SIN=fast_sin, EVEN_K=True, PRECISION="tf32", UPCAST=False,
                  BK=32, BM=128, BN=64)
    return _hopper_compile(fn, consts).asm["ptx"]


# -- the TMA path (kernels/conv_tma.py) ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tma(cc: ModuleType) -> Iterator[ModuleType]:
    """conv_tma bound to this run's causal_conv (the interpreter without a GPU, for this module's tests only: the
    pointer kernel's tests elsewhere keep their path); skips where TMA cannot run."""
    ct = kernel_module("conv_tma")
    if ct.TensorDescriptor is None or (DEVICE == "cuda" and torch.cuda.get_device_capability()[0] < 9):
        pytest.skip("TMA needs Triton >= 3.4 and, on CUDA, compute capability >= 9")
    yield ct
    if DEVICE == "cpu":
        importlib.reload(ct)  # compiled mode again: causal_conv on CPU tensors stays on the pointer kernel


@pytest.mark.slow
@pytest.mark.parametrize(("cin", "n", "taps", "dil", "length", "b"), [
    (32, 48, 7, 1, 70, 3),   # two row tiles per batch row, the second past the history
    (64, 96, 7, 12, 130, 2),  # history of 72 rows: the second tile's early taps read it too
    (32, 64, 7, 9, 64, 2),   # exactly one tile per row
    (32, 40, 2, 1, 80, 3),   # the transposed-conv form (one carried frame), N not a multiple of the tile
    (64, 32, 1, 1, 9, 5),    # one tap without history: one long row over batch rows
    (96, 96, 7, 3, 100, 2),  # the codec's last block: 96 channels, Cin not a multiple of 64
])
@pytest.mark.parametrize("epilogue", ["plain", "snake_main", "residual_out2"])
def test_tma_conv_matches_torch_and_pointer_kernel(cc: ModuleType, tma: ModuleType, cin: int, n: int, taps: int,
                                                    dil: int, length: int, b: int, epilogue: str) -> None:
    """conv_tma's zero-filled tiles (history before each batch row, nothing past its end) give the conv: against
    the fp32 reference (torch's conv1d over [history | new]) and against the pointer kernel."""
    g = torch.Generator().manual_seed(cin + n + length + len(epilogue))
    hist = (taps - 1) * dil
    x = torch.randn(b, length, cin, generator=g).to(torch.bfloat16).to(DEVICE)
    w = (torch.randn(n, cin, taps, generator=g) / (cin * taps) ** 0.5).to(torch.bfloat16).to(DEVICE)
    kw: dict = dict(bias=torch.randn(n, generator=g).to(torch.bfloat16).to(DEVICE))
    if hist:  # a pool view as SlotPool's: slot stride a multiple of 16 elements beyond the window
        kw.update(state=_pool(4, hist, cin, g, torch.bfloat16, pad=-(hist * cin) % 16 + 16),
                  slots=torch.tensor([3, 0, 1][:b], device=DEVICE))
    if epilogue == "snake_main":
        kw["snake_main"] = _snake(n, g)
    elif epilogue == "residual_out2":
        kw.update(residual=torch.randn(b, length, n, generator=g).to(torch.bfloat16).to(DEVICE),
                  snake_out2=_snake(n, g))
    wk = cc.conv_weight(w)
    tma = cc.ConvOptions(tma_min_length=64)  # the test's short rows take the TMA path too
    assert cc._tma_tiling(x, wk, kw.get("state"), taps, 64) == ((1, b * length) if taps == 1 else (b, length))
    got = cc.causal_conv(x, wk, taps, dil, **kw, options=tma)
    _assert_outputs_close(got, cc.causal_conv_ref(x, wk, taps, dil, **kw), torch.bfloat16)
    pointer = cc.ConvOptions(tma=False)
    _assert_outputs_close(got, cc.causal_conv(x, wk, taps, dil, **kw, options=pointer), torch.bfloat16)


def test_tma_tiling_keeps_short_rows_and_unaligned_convs_on_the_pointer_kernel(cc: ModuleType, tma: ModuleType,
                                                                               ) -> None:
    """Rows with history shorter than tma_min_length or a 64-row tile, fp32, Cin not a multiple of 32 and N = 1
    (rows of 2 bytes) stay on the pointer kernel; a one-tap conv is one long row whatever its batch rows."""
    g = torch.Generator().manual_seed(5)
    state = _pool(3, 6, 64, g, torch.bfloat16, pad=16)
    w = torch.randn(7 * 64, 32).to(torch.bfloat16).to(DEVICE)
    x = torch.randn(2, 511, 64).to(torch.bfloat16).to(DEVICE)
    default = cc.ConvOptions().tma_min_length
    assert default == 512 and cc._tma_tiling(x, w, state, 7, default) is None
    assert cc._tma_tiling(x, w[:64].contiguous(), None, 1, default) == (1, 2 * 511)
    x = torch.randn(2, 63, 64).to(torch.bfloat16).to(DEVICE)
    assert cc._tma_tiling(x, w, state, 7, 0) is None
    x = torch.randn(2, 64, 64).to(torch.bfloat16).to(DEVICE)
    assert cc._tma_tiling(x, w, state, 7, 0) == (2, 64)
    assert cc._tma_tiling(x.float(), w.float(), state.float(), 7, 0) is None
    assert cc._tma_tiling(x, w[:, :1].contiguous(), state, 7, 0) is None
    x48 = torch.randn(2, 64, 48).to(torch.bfloat16).to(DEVICE)
    assert cc._tma_tiling(x48, w[: 7 * 48].contiguous(), _pool(3, 6, 48, g, torch.bfloat16, pad=16), 7, 0) is None


def test_fast_sin_squared_matches_torch(cc: ModuleType) -> None:
    """The 16-bit epilogues' sin(z)**2 (Cody-Waite reduction by pi and an odd polynomial) against float64 sin on
    fresh random arguments from tiny to 1e4, and at the reduction's edges (multiples of pi/2)."""
    g = torch.Generator().manual_seed(23)
    scales = torch.tensor([1e-3, 1.0, 10.0, 100.0, 1e4]).repeat_interleave(2000)
    z = torch.randn(scales.numel(), generator=g) * scales
    edges = torch.arange(-64, 65) * (torch.pi / 2)
    z = torch.cat([z, edges, edges + 1e-4, edges - 1e-4]).float()
    got = cc.sin_squared(z.to(DEVICE)).cpu().double()
    want = torch.sin(z.double()) ** 2
    err = (got - want).abs()
    assert err[z.abs() <= 100].max() < 3e-7, err[z.abs() <= 100].max()
    assert err.max() < 2e-6, err.max()  # |z| ~ 4e4: the reduction's error grows with the multiple of pi


@pytest.mark.parametrize("epilogue", ["snake_main", "residual_out2"])
def test_fast_sin_epilogue_equals_sinf_within_one_bf16_step(cc: ModuleType, epilogue: str) -> None:
    """fast_sin changes a bf16 output by at most one rounding step (a value on a rounding boundary)."""
    g = torch.Generator().manual_seed(19)
    b, length, cin, n, taps, dil = 2, 40, 32, 48, 7, 1
    x = (2 * torch.randn(b, length, cin, generator=g)).to(torch.bfloat16).to(DEVICE)
    w = (torch.randn(n, cin, taps, generator=g) / 8).to(torch.bfloat16).to(DEVICE)
    kw = _epilogue_kwargs(epilogue, b, length, cin, n, taps, dil, g, torch.bfloat16)
    outs = []
    for fast in (True, False):
        outs.append(cc.causal_conv(x, cc.conv_weight(w), taps, dil, **kw, options=cc.ConvOptions(fast_sin=fast)))
    for fast, accurate in zip(*outs, strict=True):
        if fast is not None:
            step = torch.finfo(torch.bfloat16).eps * accurate.float().abs().clamp(min=1e-2)
            assert ((fast.float() - accurate.float()).abs() <= step).all()
            assert (fast != accurate).float().mean() < 0.01


@pytest.mark.slow
def test_fast_sin_leaves_libdevice_sinf_out_on_hopper() -> None:
    """The point of fast_sin, on the compiler's output for sm_90: libdevice's sinf brings its slow-path range
    reduction (a local-memory table, inlined per element); the polynomial has none, and the kernel is shorter."""
    fast, accurate = _hopper_ptx(fast_sin=True), _hopper_ptx(fast_sin=False)
    assert "ld.local" in accurate and "__nv_sinf" in accurate
    assert "ld.local" not in fast and "__nv_sinf" not in fast
    assert len(fast.splitlines()) < len(accurate.splitlines()) / 2


@pytest.mark.parametrize("taps", [7, 1])
def test_tma_kernel_compiles_to_tma_loads_and_async_wgmma_on_hopper(taps: int) -> None:
    """conv_tma on the compiler's output for sm_90 (CI has no GPU): its tiles arrive by TMA (cp.async.bulk.tensor)
    into a pipeline feeding asynchronous wgmma, the history loop too; no per-element address arithmetic."""
    ct = _compiled_kernels("conv_tma")
    bm, bn, bk = 128, 128, 64
    consts = dict(TAPS=taps, HAS_STATE=taps > 1, HAS_BIAS=True, SNAKE_MAIN=taps > 1, HAS_RES=taps == 1,
                  CLAMP=False, STORE_MAIN=True, HAS_OUT2=taps == 1, FAST_SIN=True, UPCAST=False,
                  BK=bk, BM=bm, BN=bn)
    act = f"tensordesc<bf16[1,{bm},{bk}]>"
    desc = {"x_desc": act, "st_desc": act, "w_desc": f"tensordesc<bf16[{bk},{bn}]>"}
    kernel = _hopper_compile(ct._conv_tma_kernel, consts, desc, warps=8, stages=3)
    ptx = kernel.asm["ptx"]
    loops = ptx.count("Inner Loop Header")
    assert "cp.async.bulk.tensor" in ptx and "wgmma.mma_async" in ptx
    assert loops >= (2 if taps > 1 else 1), loops  # with history: its own pipelined loop
    assert "ld.global.b16" not in ptx  # no element-wise activation loads
    assert kernel.metadata.shared >= 3 * (bm * bk + bk * bn) * 2  # three stages of both tiles

"""kernels/causal_conv.py against PyTorch: the implicit-GEMM conv with pool-held history, its epilogues, the
transposed-conv form, and the window advance (TRITON_INTERPRET=1 without a GPU)."""

from __future__ import annotations

from types import ModuleType

import pytest
import torch
import torch.nn.functional as F
from conv_cases import assert_outputs_close, epilogue_kwargs, pool_view, snake_params
from triton_mode import DEVICE, compiled_copy, hopper_compile, kernel_module

pytest.importorskip("triton")
pytestmark = pytest.mark.usefixtures("no_tf32")  # the oracles are torch convs in fp32


@pytest.fixture(scope="module")
def cc() -> ModuleType:
    return kernel_module("causal_conv")


@pytest.mark.parametrize(("cin", "n", "taps", "dil", "length"), [
    (32, 48, 7, 1, 5), (16, 40, 7, 3, 9), (64, 16, 3, 1, 1), (24, 20, 7, 9, 30), (32, 32, 2, 1, 4),
])
@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_conv_matches_torch_conv1d(cc: ModuleType, cin: int, n: int, taps: int, dil: int, length: int,
                                   dtype: torch.dtype) -> None:
    """History rows read from a pool view (slot stride larger than its rows), a sink row, odd Cin and N."""
    g = torch.Generator().manual_seed(cin * 100 + length)
    b, hist = 3, (taps - 1) * dil
    x = torch.randn(b, length, cin, generator=g).to(dtype).to(DEVICE)
    w = (torch.randn(n, cin, taps, generator=g) / (cin * taps) ** 0.5).to(dtype).to(DEVICE)
    bias = torch.randn(n, generator=g).to(dtype).to(DEVICE)
    state = pool_view(5, hist, cin, g, dtype)
    slots = torch.tensor([3, 0, 1], device=DEVICE)
    got, _ = cc.causal_conv(x, cc.conv_weight(w), taps, dil, state=state, slots=slots, bias=bias)
    # Independent oracle: torch's conv over the concatenated history, in fp32.
    full = torch.cat([state[slots], x], 1).float().transpose(1, 2)
    want = F.conv1d(full, w.float(), bias.float(), dilation=dil).transpose(1, 2)
    tol = 1e-4 if dtype == torch.float32 else 3e-2
    torch.testing.assert_close(got.float(), want, atol=tol, rtol=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("epilogue", ["snake_main", "residual_out2", "clamp_fp32", "out2_only"])
def test_epilogues_match_reference(cc: ModuleType, dtype: torch.dtype, epilogue: str) -> None:
    g = torch.Generator().manual_seed(7)
    b, length, cin, n, taps, dil = 2, 11, 32, 24, 7, 3
    x = (2 * torch.randn(b, length, cin, generator=g)).to(dtype).to(DEVICE)
    w = (torch.randn(n, cin, taps, generator=g) / 8).to(dtype).to(DEVICE)
    kw = epilogue_kwargs(epilogue, b, length, cin, n, taps, dil, g, dtype)
    got = cc.causal_conv(x, cc.conv_weight(w), taps, dil, **kw)
    assert_outputs_close(got, cc.causal_conv_ref(x, cc.conv_weight(w), taps, dil, **kw), dtype)
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
    state = pool_view(3, 1, cin, g, torch.float32)
    slots = torch.tensor([1, 2], device=DEVICE)
    act = snake_params(cout, g)  # the next SnakeBeta, per output channel (columns r*Cout + o repeat them)
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
    state = pool_view(6, hist, c, g, torch.float32)
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


def _hopper_ptx(fast_sin: bool) -> str:
    """The pointer kernel's PTX for sm_90."""
    fn = compiled_copy("causal_conv")._causal_conv_kernel
    consts = dict(TAPS=7, HAS_STATE=True, HAS_BIAS=True, SNAKE_MAIN=True, HAS_RES=False, CLAMP=False,
                  STORE_MAIN=True, HAS_OUT2=False, FAST_SIN=fast_sin, EVEN_K=True, PRECISION="tf32", UPCAST=False,
                  BK=32, BM=128, BN=64)
    return hopper_compile(fn, consts).asm["ptx"]


def test_fast_sin_squared_matches_torch(cc: ModuleType) -> None:
    """The 16-bit epilogues' sin(z)**2 (Cody-Waite reduction by pi and an odd polynomial) against float64 sin on
    fresh random arguments from tiny to 1e4, and at the reduction's edges (multiples of pi/2)."""
    g = torch.Generator().manual_seed(23)
    scales = torch.tensor([1e-3, 1.0, 10.0, 100.0, 1e4]).repeat_interleave(2000)
    z = torch.randn(scales.numel(), generator=g) * scales
    edges = torch.arange(-64, 65) * (torch.pi / 2)
    z = torch.cat([z, edges, edges + 1e-4, edges - 1e-4]).float()
    got = cc.sin_squared(z.to(DEVICE)).cpu().double()
    want = cc.sin_squared_ref(z)
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
    kw = epilogue_kwargs(epilogue, b, length, cin, n, taps, dil, g, torch.bfloat16)
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

"""kernels/conv_tma.py, causal_conv's TMA path: against the fp32 reference (causal_conv_ref) and the pointer kernel
on fresh random inputs (TRITON_INTERPRET=1 without a GPU), which shapes take it, and what it compiles to on sm_90."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from types import ModuleType

import pytest
import torch
from conv_cases import assert_outputs_close, pool_view, snake_params
from triton_mode import DEVICE, compiled_copy, hopper_compile, kernel_module

pytest.importorskip("triton")
pytestmark = pytest.mark.usefixtures("no_tf32")  # the oracles are torch convs in fp32


@pytest.fixture(scope="module")
def cc() -> ModuleType:
    return kernel_module("causal_conv")


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
        kw.update(state=pool_view(4, hist, cin, g, torch.bfloat16, pad=-(hist * cin) % 16 + 16),
                  slots=torch.tensor([3, 0, 1][:b], device=DEVICE))
    if epilogue == "snake_main":
        kw["snake_main"] = snake_params(n, g)
    elif epilogue == "residual_out2":
        kw.update(residual=torch.randn(b, length, n, generator=g).to(torch.bfloat16).to(DEVICE),
                  snake_out2=snake_params(n, g))
    wk = cc.conv_weight(w)
    tma = cc.ConvOptions(tma_min_length=64)  # the test's short rows take the TMA path too
    assert cc._tma_tiling(x, wk, kw.get("state"), taps, 64) == ((1, b * length) if taps == 1 else (b, length))
    got = cc.causal_conv(x, wk, taps, dil, **kw, options=tma)
    assert_outputs_close(got, cc.causal_conv_ref(x, wk, taps, dil, **kw), torch.bfloat16)
    pointer = cc.ConvOptions(tma=False)
    assert_outputs_close(got, cc.causal_conv(x, wk, taps, dil, **kw, options=pointer), torch.bfloat16)


def test_tma_tiling_keeps_short_rows_and_unaligned_convs_on_the_pointer_kernel(cc: ModuleType, tma: ModuleType,
                                                                               ) -> None:
    """Rows with history shorter than tma_min_length or a 64-row tile, fp32, Cin not a multiple of 32 and N = 1
    (rows of 2 bytes) stay on the pointer kernel; a one-tap conv is one long row whatever its batch rows."""
    g = torch.Generator().manual_seed(5)
    state = pool_view(3, 6, 64, g, torch.bfloat16, pad=16)
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
    assert cc._tma_tiling(x48, w[: 7 * 48].contiguous(), pool_view(3, 6, 48, g, torch.bfloat16, pad=16), 7, 0) is None


@pytest.mark.parametrize("taps", [7, 1])
def test_tma_kernel_compiles_to_tma_loads_and_async_wgmma_on_hopper(taps: int) -> None:
    """conv_tma on the compiler's output for sm_90 (CI has no GPU): its tiles arrive by TMA (cp.async.bulk.tensor)
    into a pipeline feeding asynchronous wgmma, the history loop too; no per-element address arithmetic."""
    ct = compiled_copy("conv_tma")
    bm, bn, bk = 128, 128, 64
    consts = dict(TAPS=taps, HAS_STATE=taps > 1, HAS_BIAS=True, SNAKE_MAIN=taps > 1, HAS_RES=taps == 1,
                  CLAMP=False, STORE_MAIN=True, HAS_OUT2=taps == 1, FAST_SIN=True, UPCAST=False,
                  BK=bk, BM=bm, BN=bn)
    act = f"tensordesc<bf16[1,{bm},{bk}]>"
    desc = {"x_desc": act, "st_desc": act, "w_desc": f"tensordesc<bf16[{bk},{bn}]>"}
    kernel = hopper_compile(ct._conv_tma_kernel, consts, desc, warps=8, stages=3)
    ptx = kernel.asm["ptx"]
    loops = ptx.count("Inner Loop Header")
    assert "cp.async.bulk.tensor" in ptx and "wgmma.mma_async" in ptx
    assert loops >= (2 if taps > 1 else 1), loops  # with history: its own pipelined loop
    assert "ld.global.b16" not in ptx  # no element-wise activation loads
    assert kernel.metadata.shared >= 3 * (bm * bk + bk * bn) * 2  # three stages of both tiles

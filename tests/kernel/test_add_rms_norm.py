"""kernels/add_rms_norm.py against its PyTorch reference on fresh random inputs (Triton's interpreter without a
GPU, compiled on CUDA), and the reference against layers.RMSNorm, the eager module it stands in for."""

from __future__ import annotations

from types import ModuleType

import pytest
import torch

pytest.importorskip("triton")

from kernel_cases import DTYPES, STEP_TOL
from triton_mode import DEVICE, kernel_module


@pytest.fixture(scope="module")
def norms() -> ModuleType:
    return kernel_module("add_rms_norm")


@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,channels", [(1, 64), (3, 48), (17, 96), (5, 100)])  # 100: a channel mask
@pytest.mark.parametrize("with_delta", [False, True])
def test_add_rms_norm(norms: ModuleType, dtype: torch.dtype, rows: int, channels: int, with_delta: bool) -> None:
    x = torch.randn(rows, channels, device=DEVICE).to(dtype)
    delta = torch.randn(rows, channels, device=DEVICE).to(dtype) if with_delta else None
    w = (1 + 0.1 * torch.randn(channels, device=DEVICE)).to(dtype)
    total, out = norms.add_rms_norm(x, delta, w, 1e-6)
    want_total, want = norms.add_rms_norm_ref(x, delta, w, 1e-6)
    torch.testing.assert_close(total.float(), want_total.float(), **STEP_TOL[dtype])
    torch.testing.assert_close(out.float(), want.float(), **STEP_TOL[dtype])


def test_add_rms_norm_ref_is_layers_rmsnorm() -> None:
    from voxgate.engine.qwen3tts.model.layers import RMSNorm

    for dtype in DTYPES:
        norm = RMSNorm(32, 1e-6)
        with torch.no_grad():
            norm.weight.copy_(1 + 0.1 * torch.randn(32))
        norm = norm.to(dtype)
        from voxgate.kernels.add_rms_norm import add_rms_norm_ref

        x, d = torch.randn(4, 32).to(dtype), torch.randn(4, 32).to(dtype)
        total, out = add_rms_norm_ref(x, d, norm.weight.detach(), 1e-6)
        assert torch.equal(total, x + d) and torch.equal(out, norm(x + d))

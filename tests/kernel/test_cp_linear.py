"""kernels/cp_linear.py (the depth loop's projection with its norm and epilogue) against its PyTorch reference on
fresh random inputs (Triton's interpreter without a GPU, compiled on CUDA)."""

from __future__ import annotations

from types import ModuleType

import pytest
import torch

pytest.importorskip("triton")

from kernel_cases import DEPTH_TOL, DTYPES, ROWS
from triton_mode import DEVICE, kernel_module

# (K, N): the predictor's projections (q|k|v, o, gate|up, down, lm_head) where compiled, small ones interpreted
SHAPES = ([(1024, 4096), (2048, 1024), (1024, 6144), (3072, 1024), (1024, 2048)] if DEVICE == "cuda"
          else [(64, 48), (96, 32), (160, 64)])


@pytest.fixture(scope="module")
def linear() -> ModuleType:
    return kernel_module("cp_linear")


def _weights(rows: int, k: int, dtype: torch.dtype) -> torch.Tensor:
    return (torch.randn(rows, k, device=DEVICE) / k**0.5).to(dtype)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("k,n", SHAPES)
@pytest.mark.parametrize("mode", ["plain", "norm", "norm_float", "residual", "norm_swiglu"])
def test_cp_linear(linear: ModuleType, dtype: torch.dtype, rows: int, k: int, n: int, mode: str) -> None:
    x = (3 * torch.randn(rows, k, device=DEVICE)).to(dtype)
    norm = (1 + 0.1 * torch.randn(k, device=DEVICE)).to(dtype) if "norm" in mode else None
    swiglu = mode.endswith("swiglu")
    w = _weights(2 * n if swiglu else n, k, dtype)
    residual = torch.randn(rows, n, device=DEVICE).to(dtype) if mode == "residual" else None
    args = dict(norm=norm, eps=1e-6, residual=residual, swiglu=swiglu, out_float=mode.endswith("float"))
    got = linear.cp_linear(x, w, **args)
    want = linear.cp_linear_ref(x, w, **args)
    assert got.shape == want.shape == (rows, n) and got.dtype == want.dtype
    torch.testing.assert_close(got.float(), want.float(), **DEPTH_TOL[dtype])


def test_cp_linear_refuses_bad_shapes(linear: ModuleType) -> None:
    x = torch.randn(2, 8, device=DEVICE)
    with pytest.raises(AssertionError):
        linear.cp_linear(x, torch.randn(4, 6, device=DEVICE))
    with pytest.raises(AssertionError):
        linear.cp_linear(x, torch.randn(4, 8, device=DEVICE), residual=torch.randn(2, 3, device=DEVICE))

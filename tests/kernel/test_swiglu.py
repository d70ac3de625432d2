"""kernels/swiglu.py (silu(gate) * up of a gate|up projection's output in one launch) against its PyTorch
reference on fresh random inputs (Triton's interpreter without a GPU, compiled on CUDA)."""

from __future__ import annotations

from types import ModuleType

import pytest
import torch

pytest.importorskip("triton")

from kernel_cases import DTYPES, ROWS, STEP_TOL
from triton_mode import DEVICE, kernel_module


@pytest.fixture(scope="module")
def act() -> ModuleType:
    return kernel_module("swiglu")


# 5, 100: a column mask; 1030: two column blocks, the second masked; real widths only where compiled
INNER = [5, 100, 1030] + ([3072, 6144] if DEVICE == "cuda" else [])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("inner", INNER)
def test_swiglu(act: ModuleType, dtype: torch.dtype, rows: int, inner: int) -> None:
    x = (4 * torch.randn(rows, 2 * inner, device=DEVICE)).to(dtype)  # SiLU's saturated tails and its dip too
    got = act.swiglu(x)
    want = act.swiglu_ref(x)
    assert got.shape == (rows, inner) and got.dtype == dtype
    torch.testing.assert_close(got.float(), want.float(), **STEP_TOL[dtype])


def test_swiglu_reads_gate_then_up(act: ModuleType) -> None:
    """Gate columns first: a zero gate gives zero whatever up holds, a zero up gives zero whatever the gate."""
    x = torch.randn(3, 2 * 7, device=DEVICE)
    x[0, :7] = 0.0
    x[1, 7:] = 0.0
    out = act.swiglu(x)
    assert torch.equal(out[:2], torch.zeros(2, 7, device=DEVICE))
    assert (out[2] != 0).all()


def test_swiglu_of_no_rows(act: ModuleType) -> None:
    assert act.swiglu(torch.empty(0, 8, device=DEVICE)).shape == (0, 4)

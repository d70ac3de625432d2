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


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("inner, hidden", [(5, 12), (100, 64)] + ([(3072, 1024), (6144, 2048)] if DEVICE == "cuda"
                                                                   else []))
def test_swiglu_scaled_by_the_residual_rms(act: ModuleType, dtype: torch.dtype, rows: int, inner: int,
                                           hidden: int) -> None:
    """With a residual (a folded post-attention norm): gate and up scaled by 1 / RMS of the residual row, then the
    same; against the reference, and the reference against the norm taken by hand (rows of very different size)."""
    x = torch.randn(rows, 2 * inner, device=DEVICE).to(dtype)  # scaled by ~0.03-3 below: no exp overflow
    res = (torch.randn(rows, hidden, device=DEVICE) * torch.logspace(-0.5, 1.5, rows, device=DEVICE)[:, None]).to(dtype)
    got = act.swiglu(x, residual=res, eps=1e-6)
    want = act.swiglu_ref(x, residual=res, eps=1e-6)
    # in bf16 the scaled gate and up are two more roundings: where the fp32 scale (its sum in another order) tips
    # one of them over a rounding boundary, the result moves by up to ~4 bf16 ulps (up to 2^-7 of the value each)
    tol = STEP_TOL[dtype] if dtype == torch.float32 else dict(rtol=4 * 2**-7, atol=2e-2)
    torch.testing.assert_close(got.float(), want.float(), **tol)
    by_hand = x.double() / res.double().pow(2).mean(-1, keepdim=True).add(1e-6).sqrt()
    gate, up = by_hand.split(inner, dim=-1)
    torch.testing.assert_close(want.double(), torch.nn.functional.silu(gate) * up, **STEP_TOL[dtype])
    assert not torch.allclose(got.float(), act.swiglu(x).float())  # the scale is not a no-op here

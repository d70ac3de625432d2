"""Inputs and checks shared by the conv kernels' tests (test_causal_conv.py, test_conv_tma.py)."""

from __future__ import annotations

import torch
from triton_mode import DEVICE


def snake_params(c: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    return (torch.rand(c, generator=g) + 0.5).to(DEVICE), (torch.rand(c, generator=g) + 0.5).to(DEVICE)


def pool_view(slots: int, hist: int, c: int, g: torch.Generator, dtype: torch.dtype, pad: int = 13) -> torch.Tensor:
    """A [slots, hist, c] view with a slot stride larger than its rows (like a SlotPool view)."""
    buf = torch.randn(slots, hist * c + pad, generator=g).to(dtype).to(DEVICE)
    return buf[:, : hist * c].view(slots, hist, c)


def epilogue_kwargs(epilogue: str, b: int, length: int, cin: int, n: int, taps: int, dil: int,
                     g: torch.Generator, dtype: torch.dtype) -> dict:
    """causal_conv's keyword arguments for one epilogue case: history in a pool, bias, and the epilogue's parts."""
    kw: dict = dict(state=pool_view(3, (taps - 1) * dil, cin, g, dtype), slots=torch.tensor([2, 1], device=DEVICE),
                    bias=torch.randn(n, generator=g).to(dtype).to(DEVICE))
    if epilogue == "snake_main":
        kw["snake_main"] = snake_params(n, g)
    elif epilogue == "residual_out2":
        kw.update(residual=torch.randn(b, length, n, generator=g).to(dtype).to(DEVICE), snake_out2=snake_params(n, g))
    elif epilogue == "clamp_fp32":
        kw.update(clamp=True, out_dtype=torch.float32)
    else:
        kw.update(store_main=False, snake_out2=snake_params(n, g))
    return kw


def assert_outputs_close(got: tuple, want: tuple, dtype: torch.dtype) -> None:
    tol = 1e-4 if dtype == torch.float32 else 5e-2
    for gt, wt in zip(got, want, strict=True):
        assert (gt is None) == (wt is None)
        if gt is not None:
            assert gt.dtype == wt.dtype and gt.shape == wt.shape
            torch.testing.assert_close(gt.float(), wt.float(), atol=tol, rtol=tol)

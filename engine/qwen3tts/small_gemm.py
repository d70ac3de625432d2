"""The `small_gemm` engine option: which matmul runs a projection of a few rows in the batched step.

    cublas    F.linear everywhere (the default until kernels/gemv.py is measured on the GPU)
    gemv      kernels/gemv.py for the code predictor's projections (q|k|v, o, gate|up, down, the input projection,
              the 15 heads) when a call has at most 16 rows, F.linear above
    gemv_all  the same for the Talker's too (its stack and codebook 0's head): decode-only buckets of <= 16 rows

A GEMV of a few rows is bound by reading the weight once, and cuBLAS runs the predictor's ~4x off the memory
bandwidth (docs/benchmarks/h200-step-profile). The row count is fixed per captured bucket, so the choice, made per
call from x.shape[0], is static inside each graph. The kernel runs where the step's other kernels are Triton
(DecoderOps.uses_triton: CUDA, or attention=triton); elsewhere its reference, F.linear, stands in.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

Linear = Callable[..., torch.Tensor]  # (x [M, K], weight [N, K], bias [N] | None) -> [M, N], like F.linear
CHOICES = ("cublas", "gemv", "gemv_all")


def few_rows(gemv: Linear, max_rows: int) -> Linear:
    """F.linear, except `gemv` for calls of at most `max_rows` rows."""
    def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        if x.dim() == 2 and x.shape[0] <= max_rows:
            return gemv(x.contiguous(), weight, bias)
        return F.linear(x, weight, bias)
    return linear


def linears(small_gemm: str, use_triton: bool) -> tuple[Linear, Linear]:
    """(the code predictor's, the Talker's) projection function for a `small_gemm` choice."""
    assert small_gemm in CHOICES, small_gemm
    if small_gemm == "cublas":
        return F.linear, F.linear
    from ...kernels import gemv

    small = few_rows(gemv.gemv if use_triton else gemv.gemv_ref, gemv.MAX_ROWS)
    return small, small if small_gemm == "gemv_all" else F.linear


def apply(linear: Linear, module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """`module(x)` through `linear` where the module is an nn.Linear (an Identity stays one)."""
    if isinstance(module, nn.Linear):
        return linear(x, module.weight, module.bias)
    return module(x)


def add_linear(linear: Linear, x: torch.Tensor, a: torch.Tensor, weight: torch.Tensor) -> None:
    """x += a @ weight^T in place (a residual add): with F.linear one cuBLAS call that adds into x (beta = 1; no
    separate add launch, the fp32 sum rounded once); with another `linear`, its product, then the add."""
    if linear is F.linear:
        x.addmm_(a, weight.t())
    else:
        x.add_(linear(a, weight))

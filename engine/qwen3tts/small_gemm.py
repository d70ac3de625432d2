"""The `small_gemm` engine option: which matmul runs a projection of a few rows in the batched step.

    cublas    F.linear everywhere
    gemv      kernels/gemv.py for the code predictor's projections (q|k|v, o and down added into the residual in
              place, gate|up, the input projection, the 15 heads) when a call has at most 16 rows, F.linear above
    gemv_all  the same for the Talker's too (its stack and codebook 0's head) at one row (TALKER_ROWS)

A GEMV of a few rows is bound by reading the weight once, and in the step's chain of dependent projections cuBLAS
reads at ~1.2-1.6 TB/s (docs/benchmarks/h200-step-profile/chain). The row count is fixed per captured bucket, so the
choice, made per call from x.shape[0], is static inside each graph. With the engine option `pdl` the kernel's
launches overlap the kernel ahead (its weights load first); with `gemv_swiglu`, gate|up and SwiGLU are one launch
(swiglu_linear). The kernel runs where the step's other kernels are Triton
(DecoderOps.uses_triton: CUDA, or attention=triton); elsewhere its reference, F.linear, stands in.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

Linear = Callable[..., torch.Tensor]  # (x [M, K], weight [N, K], bias [N] | None) -> [M, N], like F.linear
CHOICES = ("auto", "cublas", "gemv", "gemv_all")


# (rows, output columns, K, gate|up pair, bytes a value) -> the kernel beats cuBLAS
Fast = Callable[[int, int, int, bool, int], bool]
# The Talker's projections take the kernel at one row only: at 8-16 rows its q|k|v and gate|up (K 2,048) read slower
# through the MMA rows kernel than through cuBLAS, and its down (K 6,144) does not fit (H100,
# docs/benchmarks/h200-step-profile/chain/rows_chain.py); the predictor's all read faster there.
TALKER_ROWS = 1


class FewRows:
    """F.linear, except `gemv` for calls of at most `max_rows` rows that `fast` says the kernel runs well (and
    `gemv_add` for residual adds, where given); `pdl` is passed to both (kernels/gemv.py: programmatic dependent
    launch)."""

    def __init__(self, gemv: Linear, max_rows: int, gemv_add: Callable[..., torch.Tensor] | None = None,
                 pdl: bool | str = False, fast: Fast | None = None,
                 gemv_swiglu: Callable[..., torch.Tensor] | None = None) -> None:
        self.gemv, self.gemv_add, self.max_rows, self.pdl, self.fast = gemv, gemv_add, max_rows, pdl, fast
        self.gemv_swiglu = gemv_swiglu  # (x, gate_up, eps, scaled, pdl=) -> silu(gate) * up, one launch

    def takes(self, x: torch.Tensor, weight: torch.Tensor, pair: bool = False) -> bool:
        """Whether x @ weight^T (pair: weight is gate|up, half its rows the output's columns) takes the kernel."""
        if x.dim() != 2 or x.shape[0] > self.max_rows:
            return False
        n = weight.shape[0] // 2 if pair else weight.shape[0]
        return self.fast is None or self.fast(x.shape[0], n, x.shape[1], pair, x.element_size())

    def takes_rows(self, rows: int, weight: torch.Tensor) -> bool:
        """Whether a call of `rows` rows of x (weight's width and dtype) @ weight^T takes the kernel."""
        return self.takes(torch.empty((rows, weight.shape[1]), dtype=weight.dtype, device="meta"), weight)

    def normed(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        """x @ weight^T times each row's 1 / RMS (x: a residual stream whose final RMSNorm, this eps, is folded
        into weight; kernels/gemv.py's norm_eps) in one launch; only for calls it `takes`."""
        assert self.takes(x, weight), (x.shape, weight.shape)
        return self.gemv(x.contiguous(), weight, None, pdl=self.pdl, norm_eps=eps)

    def __call__(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        if self.takes(x, weight):
            return self.gemv(x.contiguous(), weight, bias, pdl=self.pdl)
        return F.linear(x, weight, bias)

    def add_(self, residual: torch.Tensor, a: torch.Tensor, weight: torch.Tensor) -> None:
        """residual += a @ weight^T in place: one launch through `gemv_add` where it takes the call."""
        if self.gemv_add is not None and self.takes(a, weight) and residual.is_contiguous():
            self.gemv_add(residual, a.contiguous(), weight, pdl=self.pdl)
        elif self.takes(a, weight):
            residual.add_(self(a, weight))
        else:
            residual.addmm_(a, weight.t())


def resolve(small_gemm: str, device: torch.device, use_triton: bool) -> str:
    """`auto` made concrete: gemv_all where the step runs Triton on a Hopper GPU (sm_90, where it was measured: on
    an H100 one stream's step 3.4 ms against cuBLAS's 4.6, 20.1 against 15.3 audio-s/s through the gateway),
    cublas elsewhere; any other choice as given."""
    if small_gemm != "auto":
        return small_gemm
    hopper = device.type == "cuda" and torch.cuda.get_device_capability(device)[0] == 9
    return "gemv_all" if use_triton and hopper else "cublas"


def linears(small_gemm: str, use_triton: bool, pdl: bool | str = False, max_rows: int | None = None,
            fuse_swiglu: bool = True, split_above: int | None = None,
            talker_rows: int = TALKER_ROWS, lanes: bool = False) -> tuple[Linear, Linear]:
    """(the code predictor's, the Talker's) projection function for a `small_gemm` choice; calls of at most
    `max_rows` rows (default: the kernel's limit; the Talker's: at most `talker_rows`) take the kernel; `pdl`: its
    launches use programmatic dependent launch (kernels/gemv.py); `fuse_swiglu`: gate|up and SwiGLU in one launch
    where the kernel takes the call (swiglu_linear); `split_above`: the rows kernel's split-K rule (gemv.rows_tiles;
    None: as the kernel ships), which also decides what fits; `lanes`: the code predictor's one-row calls through
    the lanes kernel (gemv_layout = lanes; at one row the Talker's read slower through it than through the one-row
    kernel, 45.4 against 43.6 us a layer on an H100, so they keep it)."""
    assert small_gemm in CHOICES and small_gemm != "auto", small_gemm  # `resolve` it first
    if small_gemm == "cublas":
        return F.linear, F.linear
    from ...kernels import gemv

    rows = min(max_rows or gemv.MAX_ROWS, gemv.MAX_ROWS)

    def few_rows(rows: int, lanes: bool) -> FewRows:
        def ruled(fn: Callable[..., object]) -> Callable[..., object]:  # the split-K rule and layout, every call
            return partial(fn, split_above=split_above, lanes=lanes)
        fast = ruled(gemv.fast)
        if use_triton:
            return FewRows(ruled(gemv.gemv), rows, ruled(gemv.gemv_add_), pdl, fast,
                           ruled(gemv.gemv_swiglu) if fuse_swiglu else None)
        # the same calls take the reference, so that both paths split them alike
        return FewRows(gemv.gemv_ref, rows, gemv.gemv_add_ref, fast=fast,
                       gemv_swiglu=gemv.gemv_swiglu_ref if fuse_swiglu else None)
    return few_rows(rows, lanes), few_rows(min(rows, talker_rows), False) if small_gemm == "gemv_all" else F.linear


def swiglu_linear(linear: Linear, swiglu: Callable[..., torch.Tensor], x: torch.Tensor, gate_up: torch.Tensor,
                  eps: float, scaled: bool) -> torch.Tensor:
    """silu(gate) * up of x @ gate_up^T ([2I, H]: gate rows, then up): one launch through FewRows's fused kernel
    where it takes the call, else the projection, then `swiglu` (the stack's kernel or reference). `scaled`: x is the
    residual stream of a folded stack, whose 1 / RMS scales gate and up first (with eps)."""
    if isinstance(linear, FewRows) and linear.gemv_swiglu is not None and linear.takes(x, gate_up, pair=True):
        return linear.gemv_swiglu(x.contiguous(), gate_up, eps, scaled, pdl=linear.pdl)
    y = linear(x, gate_up)
    return swiglu(y, residual=x, eps=eps) if scaled else swiglu(y)


def apply(linear: Linear, module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """`module(x)` through `linear` where the module is an nn.Linear (an Identity stays one)."""
    if isinstance(module, nn.Linear):
        return linear(x, module.weight, module.bias)
    return module(x)


def add_linear(linear: Linear, x: torch.Tensor, a: torch.Tensor, weight: torch.Tensor) -> None:
    """x += a @ weight^T in place (a residual add): with F.linear one cuBLAS call that adds into x (beta = 1; no
    separate add launch, the fp32 sum rounded once); with FewRows, its own add (kernels/gemv.py's gemv_add_, the
    same rounding); with another `linear`, its product, then the add."""
    if linear is F.linear:
        x.addmm_(a, weight.t())
    elif isinstance(linear, FewRows):
        linear.add_(x, a, weight)
    else:
        x.add_(linear(a, weight))

"""A decoder MLP's SwiGLU in one launch: silu(gate) * up from the gate|up projection's output [N, 2I] (gate columns
first) -> [N, I]. PyTorch spends two kernels on it (F.silu, then the product) and the split's views cost nothing;
the batched step runs it once per layer and token batch (1.7B: 28 Talker layers + 15 x 5 predictor layers a step),
so one launch instead of two takes ~100 launches off a captured step.

Roundings are PyTorch's (fused_stack.py's `F.silu(gate) * up`, kernels/cp_linear.py's SwiGLU epilogue): SiLU in
fp32 of the stored gate, rounded to the storage dtype, times the stored up in fp32, rounded. In fp32 both roundings
are no-ops. Elementwise per row, no host sync: capturable in a CUDA graph.

With `residual` (a stack whose post-attention RMSNorm weight is folded into gate|up's weight: fused_stack.py,
`fold_norms`), gate and up are the projection of the unnormalized residual rows: each program first takes 1 / RMS
of its row's residual and scales gate and up by it (each product rounded), the norm the projection's input no
longer had, one launch a layer fewer.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from .add_rms_norm import rms_scaled
from .utils import pdl_launch, row_rstd, wait_for_inputs

BLOCK = 1024  # columns per program: the 1.7B's widths (Talker 6,144, predictor 3,072) are multiples of it


@triton.jit
def _swiglu_kernel(x_ptr, out_ptr, res_ptr, inner, H, eps, BLOCK_I: tl.constexpr, HAS_RES: tl.constexpr,
                   BLOCK_H: tl.constexpr, PDL: tl.constexpr):
    # x [N, 2 * inner] contiguous (gate then up), out [N, inner] contiguous; HAS_RES: res [N, H] contiguous, whose
    # rows' 1 / RMS scales gate and up first. grid: (N, cdiv(inner, BLOCK_I)).
    wait_for_inputs(PDL)
    row = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1) * BLOCK_I + tl.arange(0, BLOCK_I)
    cm = c < inner
    dtype = out_ptr.dtype.element_ty
    gate = tl.load(x_ptr + row * 2 * inner + c, mask=cm, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + row * 2 * inner + inner + c, mask=cm, other=0.0).to(tl.float32)
    if HAS_RES:
        scale = row_rstd(res_ptr + row * H, H, eps, BLOCK_H)
        gate = (gate * scale).to(dtype).to(tl.float32)
        up = (up * scale).to(dtype).to(tl.float32)
    silu = (gate / (1.0 + tl.exp(-gate))).to(dtype).to(tl.float32)
    tl.store(out_ptr + row * inner + c, (silu * up).to(dtype), mask=cm)


def _check(x: torch.Tensor) -> int:
    assert x.dim() == 2 and x.shape[1] % 2 == 0 and x.is_contiguous(), (x.shape, x.stride())
    return x.shape[1] // 2


def _check_residual(x: torch.Tensor, residual: torch.Tensor | None) -> None:
    assert residual is None or (residual.dim() == 2 and residual.shape[0] == x.shape[0]
                                and residual.is_contiguous() and residual.dtype == x.dtype), \
        None if residual is None else (residual.shape, x.shape)


def swiglu(x: torch.Tensor, residual: torch.Tensor | None = None, eps: float = 0.0, pdl: bool | str = False,
           ) -> torch.Tensor:
    """x [N, 2I] contiguous, gate columns then up columns -> silu(gate) * up [N, I] in x's dtype. `residual`
    [N, H]: x is first scaled by 1 / RMS of its rows (the folded norm, with `eps`). `pdl`: launched with
    programmatic dependent launch (kernels/utils.py)."""
    inner = _check(x)
    _check_residual(x, residual)
    rows = x.shape[0]
    out = torch.empty((rows, inner), dtype=x.dtype, device=x.device)
    if rows == 0 or inner == 0:
        return out
    block = min(BLOCK, triton.next_power_of_2(inner))
    width = residual.shape[1] if residual is not None else 1
    on, extra = pdl_launch(_swiglu_kernel, pdl)
    _swiglu_kernel[(rows, triton.cdiv(inner, block))](
        x, out, residual if residual is not None else x, inner, width, eps, BLOCK_I=block,
        HAS_RES=residual is not None, BLOCK_H=triton.next_power_of_2(width), PDL=on, num_warps=max(1, block // 256),
        **extra)
    return out


def swiglu_ref(x: torch.Tensor, residual: torch.Tensor | None = None, eps: float = 0.0) -> torch.Tensor:
    """The same in plain PyTorch: the split and the two ops fused_stack.py ran before this kernel (with
    `residual`, after add_rms_norm.rms_scaled)."""
    gate, up = x.split(_check(x), dim=-1)
    _check_residual(x, residual)
    if residual is not None:
        gate, up = rms_scaled(x, residual, eps).split(gate.shape[-1], dim=-1)
    return F.silu(gate) * up

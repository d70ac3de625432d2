"""A decoder MLP's SwiGLU in one launch: silu(gate) * up from the gate|up projection's output [N, 2I] (gate columns
first) -> [N, I]. PyTorch spends two kernels on it (F.silu, then the product) and the split's views cost nothing;
the batched step runs it once per layer and token batch (1.7B: 28 Talker layers + 15 x 5 predictor layers a step),
so one launch instead of two takes ~100 launches off a captured step.

Roundings are PyTorch's (fused_stack.py's `F.silu(gate) * up`, kernels/cp_linear.py's SwiGLU epilogue): SiLU in
fp32 of the stored gate, rounded to the storage dtype, times the stored up in fp32, rounded. In fp32 both roundings
are no-ops. Elementwise per row, no host sync: capturable in a CUDA graph.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

BLOCK = 1024  # columns per program: the 1.7B's widths (Talker 6,144, predictor 3,072) are multiples of it


@triton.jit
def _swiglu_kernel(x_ptr, out_ptr, inner, BLOCK_I: tl.constexpr):
    # x [N, 2 * inner] contiguous (gate then up), out [N, inner] contiguous. grid: (N, cdiv(inner, BLOCK_I)).
    row = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1) * BLOCK_I + tl.arange(0, BLOCK_I)
    cm = c < inner
    dtype = out_ptr.dtype.element_ty
    gate = tl.load(x_ptr + row * 2 * inner + c, mask=cm, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + row * 2 * inner + inner + c, mask=cm, other=0.0).to(tl.float32)
    silu = (gate / (1.0 + tl.exp(-gate))).to(dtype).to(tl.float32)
    tl.store(out_ptr + row * inner + c, (silu * up).to(dtype), mask=cm)


def _check(x: torch.Tensor) -> int:
    assert x.dim() == 2 and x.shape[1] % 2 == 0 and x.is_contiguous(), (x.shape, x.stride())
    return x.shape[1] // 2


def swiglu(x: torch.Tensor) -> torch.Tensor:
    """x [N, 2I] contiguous, gate columns then up columns -> silu(gate) * up [N, I] in x's dtype."""
    inner = _check(x)
    rows = x.shape[0]
    out = torch.empty((rows, inner), dtype=x.dtype, device=x.device)
    if rows == 0 or inner == 0:
        return out
    block = min(BLOCK, triton.next_power_of_2(inner))
    _swiglu_kernel[(rows, triton.cdiv(inner, block))](x, out, inner, BLOCK_I=block, num_warps=max(1, block // 256))
    return out


def swiglu_ref(x: torch.Tensor) -> torch.Tensor:
    """The same in plain PyTorch: the split and the two ops fused_stack.py ran before this kernel."""
    gate, up = x.split(_check(x), dim=-1)
    return F.silu(gate) * up

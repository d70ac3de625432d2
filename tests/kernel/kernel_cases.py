"""Cases shared by the kernel tests of the batched step (add_rms_norm, qk_norm_rope, slot_attention) and of the
depth loop (cp_linear, cp_attend, sample_draw): dtypes, row counts, real head shapes, and tolerances."""

from __future__ import annotations

import torch
from triton_mode import DEVICE

DTYPES = [torch.float32, torch.bfloat16]
# 200: more programs than SMs and more than one row tile; the larger counts only where the kernels are compiled
ROWS = [1, 2, 3, 17] + ([64, 128, 200] if DEVICE == "cuda" else [])
# the real shapes (16/8 heads of 128) only where the kernel is compiled: interpreted, they take seconds each
REAL_HEADS = [(16, 8, 128)] if DEVICE == "cuda" else []

# The step's kernels. The interpreter truncates fp32 -> bf16 where the GPU rounds to nearest, so a value can sit
# one bf16 step apart there (2^-7 relative at worst); fp32 differs only by the reduction order.
STEP_TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.bfloat16: dict(rtol=2e-2, atol=2e-2)}

# The depth loop's kernels. fp32 differs only by the reduction order. The interpreter truncates fp32 -> bf16 where
# the GPU rounds to nearest: truncation always shrinks, so the normalized inputs' errors add up in one direction
# through a dot, and SwiGLU rounds four more times; interpreted, a bf16 output can sit a few steps apart (seen:
# 6 steps, 3.8 %).
_DEPTH_BF16 = 2e-2 if DEVICE == "cuda" else 6e-2
DEPTH_TOL = {torch.float32: dict(rtol=1e-4, atol=1e-4), torch.bfloat16: dict(rtol=_DEPTH_BF16, atol=_DEPTH_BF16)}

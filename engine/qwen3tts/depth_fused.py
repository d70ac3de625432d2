"""The code predictor's depth loop with passes 1..14 in five launches a layer (kernels/cp_linear.py,
kernels/cp_attend.py) instead of the fused stack's 9:

    q|k|v   = cp_linear(x, norm=input_layernorm)            RMSNorm in the projection's prologue
    o       = cp_attend(q|k|v)                              q/k-norm + RoPE + KV write + attention
    x       = cp_linear(o, o_proj, residual=x)
    gate*up = cp_linear(x, gate|up, norm=post_attention_layernorm, swiglu)
    x       = cp_linear(gate*up, down_proj, residual=x)

and the head as cp_linear(x, lm_head[k], norm=final norm) in fp32. Every codebook's draw (the Talker's codebook 0
too) is one launch (kernels/sample_draw.py) where no row needs top-p, on Exp(1) noise made once a step. The next
pass's input is one row lookup, as in the stack's depth loop: StepModel.depth_input reads the input projection
folded into the 14 fed-back embedding tables at load (batch_step.projected_tables). Pass 0 (two tokens a row: the
Talker's hidden state and codebook 0) keeps the fused stack, whose separate KV write lets a token attend to a key
written in the same launch.

Launches a pass at 1-128 rows, counted from the code (bench/launch_count.py): the stack's depth loop 49 (9 a
layer and its first norm, the lookup, the head, the draw kernel; ~12 more with PyTorch's draw), this one 28 (5 a
layer, the lookup, the head, the draw).

With `depth = persistent` (PersistentDepth), buckets of <= 16 rows run a pass's layers in one launch instead
(kernels/depth_pass.py: one CTA per SM walks the layers, phases separated by a grid barrier), then the same head
and draw: 4 launches a pass. Larger buckets take the stack's layers.

Roundings are the fused stack's at every step (the kernels' references are its ops), so `DepthOps.for_triton(False)`
reproduces the stack's depth loop on the CPU.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from .fused_stack import FusedStack
from .model.code_predictor import CodePredictor


@dataclass(frozen=True)
class DepthOps:
    linear: Callable[..., torch.Tensor]
    attend: Callable[..., torch.Tensor]
    draw: Callable[..., torch.Tensor]  # kernels/sample_draw.py: every codebook's draw in one launch
    run_pass: Callable[..., torch.Tensor]  # kernels/depth_pass.py: a pass's layers in one launch (<= 16 rows)

    @classmethod
    def for_triton(cls, use_triton: bool) -> DepthOps:
        if use_triton:
            from ...kernels.cp_attend import cp_attend
            from ...kernels.cp_linear import cp_linear
            from ...kernels.depth_pass import depth_pass
            from ...kernels.sample_draw import sample_draw

            return cls(cp_linear, cp_attend, sample_draw, depth_pass)
        from ...kernels.cp_attend import cp_attend_ref
        from ...kernels.cp_linear import cp_linear_ref
        from ...kernels.depth_pass import depth_pass_ref
        from ...kernels.sample_draw import sample_draw_ref

        return cls(cp_linear_ref, cp_attend_ref, sample_draw_ref, depth_pass_ref)


class FusedDepth:
    """Passes 1..14 of CodePredictor.predict for R rows at once, on the stack's fused weights (shared, not copied)."""

    def __init__(self, predictor: CodePredictor, stack: FusedStack, ops: DepthOps) -> None:
        self.ops, self.stack = ops, stack
        self.eps = stack.eps
        self.lm_heads = [head.weight for head in predictor.lm_head]

    def head(self, x: torch.Tensor, k: int) -> torch.Tensor:
        """fp32 logits [R, V] of codebook k+1 from the last layer's residual stream x [R, H]."""
        return self.ops.linear(x, self.lm_heads[k], norm=self.stack.final_norm, eps=self.eps, out_float=True)

    def layers(self, x: torch.Tensor, store: torch.Tensor, rows: torch.Tensor, positions: torch.Tensor,
               cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """One pass: x [R, H], token r the only new one of row rows[r] of the store [L, 2 (k, v), R, Hkv, P, D], at
        positions[r] -> the residual stream after the last layer (not normalized: the head's prologue does that)."""
        s, lin = self.stack, self.ops.linear
        for i, (in_w, qkv_w, qn, kn, o_w, post_w, gate_up_w, down_w) in enumerate(s.layers):
            qkv = lin(x, qkv_w, norm=in_w, eps=self.eps)
            o = self.ops.attend(qkv, qn, kn, cos, sin, positions, store[i, 0], store[i, 1], rows, s.heads, s.kv_heads,
                                self.eps)
            x = lin(o, o_w, residual=x)
            act = lin(x, gate_up_w, norm=post_w, eps=self.eps, swiglu=True)
            x = lin(act, down_w, residual=x)
        return x


class PersistentDepth(FusedDepth):
    """FusedDepth with a pass's layers in one launch (kernels/depth_pass.py) on the stack's stacked weights, for
    buckets of at most `max_rows` rows; the head and the draw are FusedDepth's."""

    max_rows = 16  # kernels/depth_pass.MAX_ROWS: one MMA row block

    def __init__(self, predictor: CodePredictor, stack: FusedStack, ops: DepthOps) -> None:
        super().__init__(predictor, stack, ops)
        assert stack.stacked is not None, "the persistent pass walks the stack's stacked weights"
        self.weights = stack.stacked

    def layers(self, x: torch.Tensor, store: torch.Tensor, rows: torch.Tensor, positions: torch.Tensor,
               cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        s = self.stack
        return self.ops.run_pass(x, self.weights, store, rows, positions, cos, sin, s.heads, s.kv_heads, self.eps)

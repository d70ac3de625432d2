"""A decoder stack (the Talker's or the code predictor's) run token-major with fused weights and fused ops, for the
batched step: 9 launches a layer instead of ~45 (a captured step is launch-bound: each tiny kernel costs a few
microseconds of the GPU's time, whatever its work).

Per layer: q|k|v as one matmul, q/k-norm + RoPE + the key/value write into the layer's KV store
(kernels/qk_norm_rope.py), attention over each token's own positions (kernels/slot_attention.py), o_proj, the
residual add + RMSNorm (one kernel, kernels/add_rms_norm.py), gate|up as one matmul, SiLU * up (one kernel,
kernels/swiglu.py), down_proj, the residual add + the next layer's RMSNorm. The modules' own weights become views of
the fused matrices, so nothing is stored twice and the eager path (layers.py, the reference every piece is tested
against) keeps working on the same tensors.

With `fold_norms`, each layer's two RMSNorm weights move into the projections they feed (q|k|v's and gate|up's
columns times the weight, the norm's weight then ones: the same function, so every path that reads the modules
stays right): the norms' launches go, and 7 launches a layer remain. The projections read the unnormalized residual
stream, and the kernel after each (qk_norm_rope, swiglu) scales its rows by 1 / RMS of the residual row, which it
reads itself; o_proj and down_proj add into the residual stream in place (small_gemm.add_linear: one cuBLAS call
with beta = 1). The fold rounds each folded weight once (in bf16, the rounding the plain path spends on each
normalized activation instead). `DecoderOps` picks the Triton kernels (CUDA) or their plain-PyTorch
references (CPU, tests); the projections run through `linear` (F.linear, or kernels/gemv.py for a few rows:
small_gemm.py).

With `fuse_attention`, a call whose tokens are each the only one of their slot (a decode step without a prompt's
tokens, the depth loop's passes 1..14) takes q/k-norm + RoPE + the KV write and the attention in one launch
(kernels/cp_attend.py): one launch a layer fewer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from .model.layers import DecoderStack
from .small_gemm import Linear, add_linear, swiglu_linear


@dataclass(frozen=True)
class DecoderOps:
    add_rms_norm: Callable[..., tuple[torch.Tensor, torch.Tensor]]
    qk_norm_rope: Callable[..., torch.Tensor]
    attend: Callable[..., torch.Tensor]
    swiglu: Callable[..., torch.Tensor]  # gate|up [N, 2I] (, residual, eps) -> silu(gate) * up [N, I]
    uses_triton: bool = False
    # q/k-norm + RoPE + KV write + attention in one launch, for calls with one token a slot (None: two launches)
    attend_new: Callable[..., torch.Tensor] | None = None

    @property
    def attend_name(self) -> str:
        """The attention kernel's name (through functools.partial, which the PDL ops are)."""
        return getattr(self.attend, "func", self.attend).__name__

    @property
    def pdl(self) -> bool | str:
        """How the ops launch: False, or with programmatic dependent launch (True, or "late": kernels/utils.py)."""
        return self.attend.keywords.get("pdl", False) if isinstance(self.attend, partial) else False

    @classmethod
    def for_device(cls, device: torch.device, kernels: str = "auto", pdl: bool | str = False,
                   fuse_attention: bool = False) -> DecoderOps:
        """kernels: triton | torch | auto (Triton on CUDA, the references elsewhere). pdl: the Triton kernels are
        launched with programmatic dependent launch, True or "late" (kernels/utils.py; the caller checks the GPU
        has it). fuse_attention: `attend_new` set (kernels/cp_attend.py, or its reference)."""
        use_triton = kernels == "triton" or (kernels == "auto" and device.type == "cuda")
        if use_triton:
            from ...kernels.add_rms_norm import add_rms_norm
            from ...kernels.cp_attend import cp_attend
            from ...kernels.qk_norm_rope import qk_norm_rope
            from ...kernels.slot_attention import slot_attention
            from ...kernels.swiglu import swiglu

            ops = (add_rms_norm, qk_norm_rope, slot_attention, swiglu, cp_attend)
            if pdl:
                ops = tuple(partial(op, pdl=pdl) for op in ops)
            return cls(*ops[:4], uses_triton=True, attend_new=ops[4] if fuse_attention else None)
        from ...kernels.add_rms_norm import add_rms_norm_ref
        from ...kernels.cp_attend import cp_attend_ref
        from ...kernels.qk_norm_rope import qk_norm_rope_ref
        from ...kernels.slot_attention import slot_attention_ref
        from ...kernels.swiglu import swiglu_ref

        return cls(add_rms_norm_ref, qk_norm_rope_ref, slot_attention_ref, swiglu_ref,
                   attend_new=cp_attend_ref if fuse_attention else None)


def _share(module: nn.Module, view: torch.Tensor) -> None:
    module.weight = nn.Parameter(view, requires_grad=False)


class FusedStack:
    """Fused weights of `stack` (its modules rewired to views of them) and the token-major forward."""

    def __init__(self, stack: DecoderStack, ops: DecoderOps, linear: Linear = F.linear, stacked: bool = False,
                 fold_norms: bool = False) -> None:
        cfg = stack.cfg
        self.ops = ops
        self.linear = linear  # the projections' matmul (small_gemm.py)
        self.eps = cfg.rms_norm_eps
        self.heads, self.kv_heads, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.intermediate = cfg.intermediate_size
        self.layers = []
        with torch.no_grad():
            for layer in stack.layers:
                a, m = layer.self_attn, layer.mlp
                qkv = torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]).contiguous()
                nq, nk = a.q_proj.weight.shape[0], a.k_proj.weight.shape[0]
                _share(a.q_proj, qkv[:nq])
                _share(a.k_proj, qkv[nq: nq + nk])
                _share(a.v_proj, qkv[nq + nk:])
                gate_up = torch.cat([m.gate_proj.weight, m.up_proj.weight]).contiguous()
                _share(m.gate_proj, gate_up[: self.intermediate])
                _share(m.up_proj, gate_up[self.intermediate:])
                assert a.q_norm is not None and a.k_norm is not None
                self.layers.append((layer.input_layernorm.weight, qkv, a.q_norm.weight, a.k_norm.weight,
                                    a.o_proj.weight, layer.post_attention_layernorm.weight, gate_up,
                                    m.down_proj.weight))
        self.final_norm = stack.norm.weight
        # stacked: each kind of weight in one tensor [L, ...] (the modules and `layers` rewired to views of it), so
        # that one kernel can walk the layers (kernels/depth_pass.py); copied once at load (1.7B predictor: 157 MB)
        self.stacked: tuple[torch.Tensor, ...] | None = self._stack(stack) if stacked else None
        self.folded = False
        if fold_norms:
            self._fold_norms()

    def _fold_norms(self) -> None:
        """RMSNorm(x) * g @ W^T = RMSNorm(x) @ (W diag(g))^T: each layer's input and post-attention norm weights
        multiplied into q|k|v's and gate|up's columns (in place: the modules' views see it), then set to ones."""
        with torch.no_grad():
            for in_w, qkv, _, _, _, post_w, gate_up, _ in self.layers:
                qkv.mul_(in_w[None, :])
                in_w.fill_(1.0)
                gate_up.mul_(post_w[None, :])
                post_w.fill_(1.0)
        self.folded = True

    def _stack(self, stack: DecoderStack) -> tuple[torch.Tensor, ...]:
        with torch.no_grad():
            kinds = tuple(torch.stack(kind) for kind in zip(*self.layers, strict=True))
        self.layers = [tuple(kind[i] for kind in kinds) for i in range(len(self.layers))]
        for layer, (in_w, qkv, qn, kn, o_w, post_w, gate_up, down) in zip(stack.layers, self.layers, strict=True):
            a, m = layer.self_attn, layer.mlp
            nq, nk = a.q_proj.weight.shape[0], a.k_proj.weight.shape[0]
            assert a.q_norm is not None and a.k_norm is not None
            for module, view in ((layer.input_layernorm, in_w), (a.q_proj, qkv[:nq]), (a.k_proj, qkv[nq: nq + nk]),
                                 (a.v_proj, qkv[nq + nk:]), (a.q_norm, qn), (a.k_norm, kn), (a.o_proj, o_w),
                                 (layer.post_attention_layernorm, post_w), (m.gate_proj, gate_up[: self.intermediate]),
                                 (m.up_proj, gate_up[self.intermediate:]), (m.down_proj, down)):
                _share(module, view)
        return kinds

    def forward(self, x: torch.Tensor, k_store: list[torch.Tensor], v_store: list[torch.Tensor], slots: torch.Tensor,
                positions: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                lengths: torch.Tensor | None = None,
                attend: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
                scratch: bool = False, one_per_slot: bool = False, normed: bool = True) -> torch.Tensor:
        """x [N, H] tokens at (slots[i], positions[i]) of the per-layer stores [S, Hkv, P, D]; cos/sin [P', D]
        tables indexed by position -> the stack's post-norm output [N, H]. Each token's key and value are written
        before it attends to positions 0..positions[i] of its slot. lengths: positions + 1 where the caller holds it
        as a constant (the depth loop's positions are: one launch fewer a pass). attend: (q, k store, v store) -> o
        instead of the ops' per-token attention, for a caller that knows more about its tokens (whole prompts:
        kernels/prefill_attention.py). scratch: x is the caller's to overwrite (folded stacks add into the residual
        stream in place; else they copy x first). one_per_slot: no two tokens share a slot, so the ops' `attend_new`
        (where set) takes each layer's attention inputs and attention in one launch; lengths must then be
        positions + 1. normed=False (folded stacks): the residual stream itself, for a caller whose next projection
        applies the final norm (its weight folded into that projection: StepModel's heads)."""
        ops, lin, n = self.ops, self.linear, x.shape[0]
        lengths = positions + 1 if lengths is None else lengths
        new = ops.attend_new if one_per_slot and attend is None else None

        def attention(i: int, qkv: torch.Tensor, qn: torch.Tensor, kn: torch.Tensor,
                      residual: torch.Tensor | None) -> torch.Tensor:
            if new is not None:
                return new(qkv, qn, kn, cos, sin, positions, k_store[i], v_store[i], slots, self.heads,
                           self.kv_heads, self.eps, residual=residual)
            q = ops.qk_norm_rope(qkv, qn, kn, cos, sin, positions, k_store[i], v_store[i], slots, self.heads,
                                 self.kv_heads, self.eps, residual=residual)
            o = ops.attend(q, k_store[i], v_store[i], slots, lengths) if attend is None else \
                attend(q, k_store[i], v_store[i])
            return o.view(n, -1)

        if self.folded:
            x = x if scratch and x.is_contiguous() else x.clone(memory_format=torch.contiguous_format)
            for i, (_, qkv_w, qn, kn, o_w, _, gate_up_w, down_w) in enumerate(self.layers):
                add_linear(lin, x, attention(i, lin(x, qkv_w), qn, kn, x), o_w)
                add_linear(lin, x, swiglu_linear(lin, ops.swiglu, x, gate_up_w, self.eps, scaled=True), down_w)
            return ops.add_rms_norm(x, None, self.final_norm, self.eps)[1] if normed else x
        assert normed, "only a folded stack leaves its final norm to the caller"
        x, h = ops.add_rms_norm(x.contiguous(), None, self.layers[0][0], self.eps)
        for i, (_, qkv_w, qn, kn, o_w, post_w, gate_up_w, down_w) in enumerate(self.layers):
            x, h = ops.add_rms_norm(x, lin(attention(i, lin(h, qkv_w), qn, kn, None), o_w), post_w, self.eps)
            down = lin(swiglu_linear(lin, ops.swiglu, h, gate_up_w, self.eps, scaled=False), down_w)
            nxt = self.layers[i + 1][0] if i + 1 < len(self.layers) else self.final_norm
            x, h = ops.add_rms_norm(x, down, nxt, self.eps)
        return h

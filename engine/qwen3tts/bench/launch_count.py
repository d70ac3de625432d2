"""Kernel launches of a decode step counted from the code, on the CPU: every aten op the step dispatches launches a
kernel on CUDA, except views and bare allocations; each Triton kernel the step would run on CUDA is stood in for by
its plain reference and counted as one launch (the reference's own ops are not counted). No GPU and no timing: a
count that a test can hold exact, and that says what a change takes off a captured step before it is measured.

The step counted is the decode part of batch_step: the Talker over R rows' inputs (`talker_tokens`) and the frame
drawn from its output (`sample_frames`: codebook 0, the depth loop's 15 passes, the ring and next-input writes),
with every codebook's draw through kernels/sample_draw.py (draw=auto on CUDA). The runner's input copies, prompt
rows and the codec call are not in it; `--codec` counts a fused codec call of the real codec's structure instead
(1 x 4 frames, with and without `codec_gemm = gemv`), where Triton runs in its interpreter:

    TRITON_INTERPRET=1 python -m voxgate.engine.qwen3tts.bench.launch_count --codec

    python -m voxgate.engine.qwen3tts.bench.launch_count ../shared/qwen3-tts/checkpoints/Qwen3-TTS-12Hz-1.7B-CustomVoice

counts a model of that config's layer counts and vocabularies (narrow widths, random weights: a count depends on
neither) at 1 row, before and after each launch-saving path (kernels/swiglu.py, the folded depth-input tables,
the heads' logits read by the draw kernel without a cast), with `depth = persistent`, and with the layer norms
folded into the projections (`fold_norms`, the engine's default: 819 launches a 1.7B step against 1,025), and with
each layer's attention inputs and attention in one launch on top (`fuse_attention`: 721), and with each depth
pass's input written by the draw before it (kernels/sample_draw.py's table: 707). On a Hopper GPU the projections
take kernels/gemv.py (`small gemm`: gate|up and SwiGLU one launch, 604), and there the predictor's heads normalize
as they project (`normed heads`: 589); a step's ring entries and next inputs take one launch (`frame epilogue`,
kernels/frame_epilogue.py: 582), and the text rows come from the table projected at load (`text table`, the
578), and codebook 0's draw applies its rules, marks its id seen and writes its
embedding row in its one launch (`codebook 0 drawn`, the engine's default there: 561).
"""

from __future__ import annotations

import argparse
import functools
import json
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

_aten = torch.ops.aten
# ops that allocate or alias without a kernel (a captured graph launches nothing for them)
NO_LAUNCH = {_aten.empty, _aten.empty_like, _aten.empty_strided, _aten.detach, _aten.lift_fresh, _aten.alias}


class LaunchCounter(TorchDispatchMode):
    """Counts the aten ops dispatched while active, by name; `kernel(name, fn)` wraps a reference so that a call
    counts once, as `triton:<name>`, whatever it runs inside. `every_op`: views and bare allocations too (each is
    still a dispatch from Python, which gives the GIL up and takes it back: docs/benchmarks/aligner-host)."""

    def __init__(self, every_op: bool = False) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()
        self.every_op = every_op
        self._inside = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if not self._inside and (self.every_op or (not func.is_view and func.overloadpacket not in NO_LAUNCH)):
            self.ops[str(func.overloadpacket)] += 1
        return func(*args, **(kwargs or {}))

    def kernel(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def launch(*args: Any, **kwargs: Any) -> Any:
            if not self._inside:
                self.ops[f"triton:{name}"] += 1
            self._inside += 1
            try:
                return fn(*args, **kwargs)
            finally:
                self._inside -= 1
        return launch

    @property
    def total(self) -> int:
        return sum(self.ops.values())


def step_launches(talker: Any, rows: int = 1, swiglu_kernel: bool = True, fold_projection: bool = True,
                  cast_logits: bool = False, persistent: bool = False, fold_norms: bool = False,
                  fuse_attention: bool = False, draw_gathers: bool = False, zero_rules: bool = False,
                  few_rows: bool = False, normed_heads: bool = True, epilogue: bool = False,
                  text_table: bool = False) -> Counter[str]:
    """The launches of one decode step at `rows` rows (the module docstring), with the step's other kernels as one
    launch each: swiglu_kernel False takes PyTorch's SiLU and product, fold_projection False the depth loop's
    lookup + input projection, cast_logits True the heads' `.float()` before each draw (as a step that records
    its logits still does), persistent True passes 1..14 as `depth = persistent` runs them (kernels/depth_pass.py
    and the fused head, kernels/cp_linear.py), fold_norms True the stacks with their layer norms folded
    (fused_stack.py; this folds `talker`'s weights in place, which changes no count), fuse_attention True each
    layer's attention inputs and attention in one launch where a call has one token a slot (kernels/cp_attend.py),
    draw_gathers True each depth pass's input written by the draw before it (no lookup launch), zero_rules True
    codebook 0's rules, seen mark and embedding row in its draw's launch too, few_rows True the
    projections through small_gemm's FewRows as `small_gemm = gemv_all` routes them on a Hopper GPU (kernels/gemv.py,
    gate|up with SwiGLU in one launch), there with normed_heads the predictor's heads normalizing as they project
    (no final-norm launch a pass); epilogue True the ring entry and next input in one launch
    (kernels/frame_epilogue.py), text_table True the text rows looked up from the projected table."""
    from voxgate.engine.qwen3tts.batch_step import (
        SampledRows,
        SamplingFeatures,
        StepModel,
        projected_text,
        sample_frames,
    )
    from voxgate.engine.qwen3tts.depth_fused import DepthOps
    from voxgate.engine.qwen3tts.fused_stack import DecoderOps
    from voxgate.engine.qwen3tts.model.layers import rope_tables
    from voxgate.engine.qwen3tts.model.sampling import NUM_PARAMS, TEMPERATURE, TOP_K
    from voxgate.kernels.cp_attend import cp_attend_ref
    from voxgate.kernels.cp_linear import cp_linear_ref
    from voxgate.kernels.depth_pass import depth_pass_ref
    from voxgate.kernels.sample_draw import sample_draw_ref
    from voxgate.kernels.swiglu import swiglu_ref

    counter = LaunchCounter()
    ref = DecoderOps.for_device(torch.device("cpu"))
    ops = DecoderOps(counter.kernel("add_rms_norm", ref.add_rms_norm), counter.kernel("qk_norm_rope", ref.qk_norm_rope),
                     counter.kernel("slot_attention", ref.attend),
                     counter.kernel("swiglu", swiglu_ref) if swiglu_kernel else swiglu_ref, uses_triton=True,
                     attend_new=counter.kernel("cp_attend", cp_attend_ref) if fuse_attention else None)
    depth = DepthOps(counter.kernel("cp_linear", cp_linear_ref), counter.kernel("cp_attend", cp_attend_ref),
                     counter.kernel("sample_draw", sample_draw_ref), counter.kernel("depth_pass", depth_pass_ref))
    linears = {}
    if few_rows:
        from voxgate.engine.qwen3tts.small_gemm import TALKER_ROWS, FewRows
        from voxgate.kernels import gemv

        kernels = (counter.kernel("gemv", gemv.gemv_ref), counter.kernel("gemv_add", gemv.gemv_add_ref))
        swiglu = counter.kernel("gemv_swiglu", gemv.gemv_swiglu_ref)
        linears = dict(predictor_linear=FewRows(*kernels[:1], gemv.MAX_ROWS, kernels[1], fast=gemv.fast,
                                                gemv_swiglu=swiglu),
                       talker_linear=FewRows(*kernels[:1], TALKER_ROWS, kernels[1], fast=gemv.fast,
                                             gemv_swiglu=swiglu))
    model = StepModel(talker, ops, depth if persistent else None, fold_projection=fold_projection,
                      persistent=persistent, fold_norms=fold_norms, **linears)
    model.heads_normed = model.heads_normed and normed_heads
    model.draw = counter.kernel("sample_draw", sample_draw_ref)
    model.draw_gathers = draw_gathers
    if epilogue:
        from voxgate.kernels.frame_epilogue import frame_epilogue_ref

        model.epilogue = counter.kernel("frame_epilogue", frame_epilogue_ref)
    model.text_table = projected_text(talker) if text_table else None
    model.draw_zero_rules = zero_rules
    state = _slot_state(talker, rows, rope_tables, NUM_PARAMS)
    state.params[:, TEMPERATURE], state.params[:, TOP_K] = 0.9, 50.0
    slots = torch.arange(1, rows + 1)
    sampled = SampledRows(slots, torch.full((rows,), 3), torch.zeros(rows, dtype=torch.long))
    features = replace(SamplingFeatures(), sampling=True, top_p=False)
    suppress = torch.zeros(talker.cfg.layers.vocab_size, dtype=torch.bool)
    positions = torch.full((rows,), 3)

    def step(x: torch.Tensor) -> None:  # x: the step's own input, as the runner's (a fresh torch.cat)
        hidden = model.talker_tokens(x, state, slots, positions, scratch=True, one_per_slot=True)
        sample_frames(model, state, hidden, sampled, talker.cfg.codec_eos_token_id, suppress, features,
                      logits_out=[] if cast_logits else None)

    with torch.no_grad():
        step(state.next_input[slots])  # the step model's constants are built here, as in the runner's warm-up
        x = state.next_input[slots]  # outside the count: the runner's cat is not the step's
        counter.ops.clear()
        with counter:
            step(x)
    return counter.ops


def _slot_state(talker: Any, rows: int, rope_tables: Callable[..., Any], num_params: int) -> Any:
    from voxgate.engine.qwen3tts.batch_step import SlotState

    lc, p = talker.cfg.layers, next(talker.parameters())
    positions, slots = 8, rows + 1
    kv = torch.zeros((lc.num_hidden_layers, 2, slots, lc.num_key_value_heads, positions, lc.head_dim), dtype=p.dtype)
    cos, sin = rope_tables(torch.arange(positions), lc.head_dim, lc.rope_theta, p.dtype)
    return SlotState(k_cache=list(kv[:, 0]), v_cache=list(kv[:, 1]), cos=cos, sin=sin,
                     next_input=torch.randn(slots, lc.hidden_size).to(p.dtype),
                     seen=torch.zeros(slots, lc.vocab_size, dtype=torch.bool),
                     params=torch.zeros(slots, num_params), x_vector=torch.zeros(slots, lc.hidden_size, dtype=p.dtype),
                     ring=torch.zeros(slots, 4, talker.cfg.num_code_groups, dtype=torch.long))


def narrow_talker(checkpoint: Path, dtype: torch.dtype = torch.bfloat16) -> Any:
    """A Talker with `checkpoint`'s layer counts, vocabularies and width relations (a projection where the
    predictor is narrower), tiny widths and random weights."""
    from voxgate.engine.qwen3tts.model.config import TalkerConfig
    from voxgate.engine.qwen3tts.model.talker import Talker
    from voxgate.engine.qwen3tts.tools.synthetic import TINY_PREDICTOR, TINY_TALKER

    talker_cfg = json.loads((checkpoint / "config.json").read_text())["talker_config"]
    predictor = talker_cfg["code_predictor_config"]
    equal = predictor["hidden_size"] == talker_cfg["hidden_size"]
    layers = talker_cfg["num_hidden_layers"], predictor["num_hidden_layers"]
    talker_cfg.update(TINY_TALKER, num_hidden_layers=layers[0], text_vocab_size=64)
    predictor.update(TINY_PREDICTOR, num_hidden_layers=layers[1])
    if equal:
        predictor["hidden_size"] = talker_cfg["hidden_size"]
    torch.manual_seed(0)
    return Talker(TalkerConfig.from_dict(talker_cfg)).to(dtype).eval()


VARIANTS = {  # name -> step_launches options: the step as it was, then with each path, then all of them
    "before": dict(swiglu_kernel=False, fold_projection=False, cast_logits=True),
    "swiglu kernel": dict(swiglu_kernel=True, fold_projection=False, cast_logits=True),
    "folded depth input": dict(swiglu_kernel=False, fold_projection=True, cast_logits=True),
    "no logits cast": dict(swiglu_kernel=False, fold_projection=False, cast_logits=False),
    "after": dict(swiglu_kernel=True, fold_projection=True, cast_logits=False),
    "persistent depth": dict(swiglu_kernel=True, fold_projection=True, cast_logits=False, persistent=True),
    "folded norms": dict(swiglu_kernel=True, fold_projection=True, cast_logits=False, fold_norms=True),
    "fused attention": dict(swiglu_kernel=True, fold_projection=True, cast_logits=False, fold_norms=True,
                            fuse_attention=True),
    "draw gathers": dict(swiglu_kernel=True, fold_projection=True, cast_logits=False, fold_norms=True,
                         fuse_attention=True, draw_gathers=True),
    "small gemm": dict(swiglu_kernel=True, fold_projection=True, cast_logits=False, fold_norms=True,
                       fuse_attention=True, draw_gathers=True, few_rows=True, normed_heads=False),
    "normed heads": dict(swiglu_kernel=True, fold_projection=True, cast_logits=False, fold_norms=True,
                         fuse_attention=True, draw_gathers=True, few_rows=True),
    "frame epilogue": dict(swiglu_kernel=True, fold_projection=True, cast_logits=False, fold_norms=True,
                           fuse_attention=True, draw_gathers=True, few_rows=True, epilogue=True),
    "text table": dict(swiglu_kernel=True, fold_projection=True, cast_logits=False, fold_norms=True,
                       fuse_attention=True, draw_gathers=True, few_rows=True, epilogue=True, text_table=True),
    "codebook 0 drawn": dict(swiglu_kernel=True, fold_projection=True, cast_logits=False, fold_norms=True,
                             fuse_attention=True, draw_gathers=True, few_rows=True, zero_rules=True,
                             epilogue=True, text_table=True),
}


def codec_launches(rows: int = 1, frames: int = 4, gemv: bool = False) -> Counter[str]:
    """One fused codec call's launches (rows x frames, after one call of the same shape), of a codec with the real
    structure (design §9's layers, rates and blocks) and narrow widths: each Triton kernel once, counted where Triton
    runs in its interpreter (TRITON_INTERPRET=1 before the kernels are imported), and the aten ops that launch.
    gemv: the transformer's projections through kernels/gemv.py (the engine option codec_gemm = gemv)."""
    import triton.runtime.interpreter as interpreter

    from ..bench.codec_measure import REAL_CODEC
    from ..codec.codec import CodecDecoder
    from ..codec.codec_fused import FusedCodecStream
    from ..model.config import CodecDecoderConfig
    from ..small_gemm import linears
    from ..tools.synthetic import TINY_CODEC

    narrow = {k: v for k, v in TINY_CODEC.items() if k != "num_hidden_layers"}
    codec = CodecDecoder(CodecDecoderConfig.from_dict({**REAL_CODEC, **narrow})).eval()
    stream = FusedCodecStream(codec, rows + 1, linear=linears("gemv", True)[0] if gemv else None)
    slots, n = torch.arange(1, rows + 1), torch.full((rows,), frames)
    codes = torch.randint(0, codec.cfg.codebook_size, (rows, frames, codec.cfg.num_quantizers))
    stream.step(slots, codes, n)
    counter, grid_call = LaunchCounter(), interpreter.GridExecutor.__call__
    interpreter.GridExecutor.__call__ = counter.kernel("triton", grid_call)
    try:
        with counter:
            stream.step(slots, codes, n)
    finally:
        interpreter.GridExecutor.__call__ = grid_call
    return counter.ops


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m voxgate.engine.qwen3tts.bench.launch_count")
    parser.add_argument("checkpoint", type=Path, nargs="?", help="a checkpoint directory (its config.json is read)")
    parser.add_argument("--rows", type=int, default=1)
    parser.add_argument("--codec", action="store_true", help="a fused codec call of ROWS x 4 frames instead (needs "
                                                             "TRITON_INTERPRET=1: the kernels run in the interpreter)")
    args = parser.parse_args(argv)
    if args.codec:
        for name, gemv in (("codec_gemm = cublas", False), ("codec_gemm = gemv", True)):
            ops = codec_launches(args.rows, gemv=gemv)
            triton_ops = ops.get("triton:triton", 0)
            print(f"{name:20s} {sum(ops.values()):5d} launches a {args.rows} x 4 codec call ({triton_ops} Triton)")
        return 0
    if args.checkpoint is None:
        parser.error("a checkpoint directory is needed (or --codec)")
    talker = narrow_talker(args.checkpoint)
    base = None
    for name, options in VARIANTS.items():
        total = sum(step_launches(talker, args.rows, **options).values())
        base = total if base is None else base
        print(f"{name:20s} {total:5d} launches a step at {args.rows} row(s)   {total - base:+d}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The decode step's launch-saving paths against their plain references on tiny checkpoints: SiLU * up in one kernel
(kernels/swiglu.py) in the fused stack, the depth loop's input from the projected tables (batch_step.projected_tables)
instead of a lookup and a GEMM, the heads' logits handed to the draw without a cast; and what each takes off a step,
counted from the code (engine/qwen3tts/bench/launch_count.py). The engine-level check of the tables is
test_engine_loop.py: its engines take them by default and must make each stream's codes alone."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import ModuleType

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("triton")

from triton_mode import DEVICE, kernel_module


@pytest.fixture(scope="module")
def act() -> ModuleType:
    return kernel_module("swiglu")


def _load(tiny_ckpt: Callable[[str], Path], kind: str, dtype: torch.dtype = torch.float32):
    from voxgate.engine.qwen3tts.model.generate import Qwen3TTS

    return Qwen3TTS.from_pretrained(tiny_ckpt(kind), dtype=dtype, device=DEVICE, progress=False)


@pytest.mark.usefixtures("no_tf32")  # true fp32 on CUDA too
def test_projected_tables_are_the_projected_embeddings(tiny_ckpt: Callable[[str], Path]) -> None:
    """fp32: every fed-back codebook's table row is its embedding through the input projection (with bias)."""
    from voxgate.engine.qwen3tts.batch_step import projected_tables

    pred = _load(tiny_ckpt, "cv17").talker.code_predictor
    assert isinstance(pred.small_to_mtp_projection, torch.nn.Linear)
    tables = projected_tables(pred)
    assert len(tables) == pred.num_code_groups - 2  # E_15 is never fed back
    codes = torch.randint(0, pred.cfg.vocab_size, (64,), device=DEVICE)
    with torch.no_grad():
        for k, table in enumerate(tables):
            assert table.shape == (pred.cfg.vocab_size, pred.cfg.hidden_size) and table.dtype == torch.float32
            want = pred.small_to_mtp_projection(pred.model.codec_embedding[k](codes))
            torch.testing.assert_close(table[codes], want, rtol=1e-5, atol=1e-5, msg=f"codebook {k + 1}")


def test_projected_tables_round_once_in_bf16(tiny_ckpt: Callable[[str], Path]) -> None:
    """bf16: each entry is the projection summed in fp64 and rounded once: within half a bf16 step of the exact
    value, give or take fp64's accumulation error (K * 2^-53 * sum of |terms|, which matters only where the terms
    cancel to near zero). Sums in fp32 miss it where terms cancel (seen here: 3.58e-7 for 3.80e-7)."""
    from voxgate.engine.qwen3tts.batch_step import projected_tables

    pred = _load(tiny_ckpt, "cv17", torch.bfloat16).talker.code_predictor
    proj = pred.small_to_mtp_projection
    w, b = proj.weight.detach().double(), proj.bias.detach().double()
    for k, table in enumerate(projected_tables(pred)):
        assert table.dtype == torch.bfloat16
        e = pred.model.codec_embedding[k].weight.detach().double()
        exact = e @ w.T + b
        accumulation = w.shape[1] * 2.0**-53 * (e.abs() @ w.abs().T + b.abs())
        err = (table.double() - exact).abs()
        assert (err <= (exact.abs() + accumulation) * 2.0**-8 + accumulation).all(), f"codebook {k + 1}"


def test_without_a_projection_the_tables_are_the_embeddings(tiny_ckpt: Callable[[str], Path]) -> None:
    """0.6B: nothing to fold, nothing stored: the tables are the embedding weights themselves."""
    from voxgate.engine.qwen3tts.batch_step import projected_tables

    pred = _load(tiny_ckpt, "cv06").talker.code_predictor
    tables = projected_tables(pred)
    assert all(t is e.weight for t, e in zip(tables, pred.model.codec_embedding, strict=False))


def _depth_logits(model, h: torch.Tensor, c0: torch.Tensor, forced: torch.Tensor,
                  float_logits: bool = True) -> list[torch.Tensor]:
    seen: list[torch.Tensor] = []

    def pick(lg: torch.Tensor) -> torch.Tensor:
        seen.append(lg)
        return forced[:, len(seen) - 1]

    with torch.no_grad():
        assert torch.equal(model.depth_loop(h, c0, pick, float_logits), forced)
    return seen


@pytest.mark.usefixtures("no_tf32")  # true fp32 on CUDA too
@pytest.mark.parametrize("kind", ["cv17", "cv06"])
def test_depth_loop_on_the_tables_and_the_swiglu_kernel_equals_the_plain_loop(tiny_ckpt: Callable[[str], Path],
                                                                             act: ModuleType, kind: str) -> None:
    """fp32, 3 rows, forced codes: every codebook's logits with the projected tables, and with SiLU * up through
    the kernel (interpreted without a GPU) in every layer, against the lookup + projection and PyTorch's SiLU."""
    from voxgate.engine.qwen3tts.batch_step import StepModel
    from voxgate.engine.qwen3tts.fused_stack import DecoderOps

    tts = _load(tiny_ckpt, kind)
    ops = DecoderOps.for_device(torch.device(DEVICE), "torch")
    assert ops.swiglu is not act.swiglu
    models = {"plain": StepModel(tts.talker, ops, fold_projection=False), "tables": StepModel(tts.talker, ops),
              "swiglu": StepModel(tts.talker, replace(ops, swiglu=act.swiglu), fold_projection=False)}
    rows, hidden = 3, tts.talker.model.codec_embedding.weight.shape[1]
    h, c0 = torch.randn(rows, hidden, device=DEVICE), torch.randn(rows, hidden, device=DEVICE)
    forced = torch.randint(0, tts.talker.code_predictor.cfg.vocab_size, (rows, 15), device=DEVICE)
    logits = {name: _depth_logits(model, h, c0, forced) for name, model in models.items()}
    for name in ("tables", "swiglu"):
        for k, (got, want) in enumerate(zip(logits[name], logits["plain"], strict=True)):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, msg=f"{name}: codebook {k + 1}")


def _far_from_one_norms(*talkers) -> None:
    """The same layer-norm weights, far from ones, in every talker's two stacks (so a fold that dropped them shows)."""
    gen = torch.Generator().manual_seed(7)
    stacks = [(t.model, t.code_predictor.model) for t in talkers]
    for layers in zip(*((s.layers for s in pair) for pair in stacks), strict=True):
        for per_talker in zip(*layers, strict=True):
            for name in ("input_layernorm", "post_attention_layernorm"):
                w = 1 + 0.5 * torch.randn(getattr(per_talker[0], name).weight.shape, generator=gen)
                for layer in per_talker:
                    with torch.no_grad():
                        getattr(layer, name).weight.copy_(w)


@pytest.mark.usefixtures("no_tf32")  # true fp32 on CUDA too
@pytest.mark.parametrize("kind", ["cv17", "cv06"])
@pytest.mark.parametrize("kernels", ["torch", "triton"])
def test_folded_norms_are_the_same_function(tiny_ckpt: Callable[[str], Path], act: ModuleType, kind: str,
                                            kernels: str) -> None:
    """fp32: a step model whose layer norms are folded into the projections (fused_stack.py, fold_norms) against
    the plain one on a copy of the same weights, norm weights far from ones: the Talker's hidden and KV for 3 tokens
    at positions 0 then 1 of their slots, and all 15 codebooks' logits of the depth loop with forced codes; and
    the folded model's own eager path still the same function. kernels=triton: the residual-scaled qk_norm_rope and
    swiglu kernels (interpreted without a GPU)."""
    from voxgate.engine.qwen3tts.batch_step import StepModel
    from voxgate.engine.qwen3tts.fused_stack import DecoderOps

    from .test_small_gemm import _talker_state

    plain_tts, folded_tts = _load(tiny_ckpt, kind), _load(tiny_ckpt, kind)
    _far_from_one_norms(plain_tts.talker, folded_tts.talker)
    ops = DecoderOps.for_device(torch.device(DEVICE), "torch")
    if kernels == "triton":
        ops = replace(ops, swiglu=act.swiglu, qk_norm_rope=kernel_module("qk_norm_rope").qk_norm_rope)
    models = {"plain": StepModel(plain_tts.talker, ops), "folded": StepModel(folded_tts.talker, ops, fold_norms=True)}
    assert models["folded"].talker_stack.folded and models["folded"].predictor_stack.folded
    norm = folded_tts.talker.model.layers[0].input_layernorm.weight
    assert torch.equal(norm, torch.ones_like(norm))
    rows, hidden = 3, plain_tts.talker.model.codec_embedding.weight.shape[1]
    h, c0 = torch.randn(rows, hidden, device=DEVICE), torch.randn(rows, hidden, device=DEVICE)
    forced = torch.randint(0, plain_tts.talker.code_predictor.cfg.vocab_size, (rows, 15), device=DEVICE)
    logits = {name: _depth_logits(model, h, c0, forced) for name, model in models.items()}
    for k, (got, want) in enumerate(zip(logits["folded"], logits["plain"], strict=True)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, msg=f"codebook {k + 1}")
    talker_out, states = {}, {}
    for name, model in models.items():
        states[name] = _talker_state(plain_tts, rows)
        x = [torch.randn(rows, hidden, device=DEVICE, generator=torch.Generator(DEVICE).manual_seed(i)) for i in (1, 2)]
        with torch.no_grad():
            talker_out[name] = [model.talker_tokens(x[p], states[name], torch.arange(rows, device=DEVICE),
                                                    torch.full((rows,), p, device=DEVICE), scratch=p == 1)
                                for p in (0, 1)]
    for p in (0, 1):
        torch.testing.assert_close(talker_out["folded"][p], talker_out["plain"][p], rtol=1e-5, atol=1e-5)
    for got, want in zip(states["folded"].k_cache + states["folded"].v_cache,
                         states["plain"].k_cache + states["plain"].v_cache, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    # the folded model's eager stack (layers.py: norm weights of ones, folded projections) is the same function
    from voxgate.engine.qwen3tts.model.layers import KVCache

    x = torch.randn(1, 5, hidden, device=DEVICE)
    eager = []
    for tts in (plain_tts, folded_tts):
        lc = tts.talker.cfg.layers
        cache = KVCache(lc.num_hidden_layers, 1, lc.num_key_value_heads, lc.head_dim, 8, torch.float32, x.device)
        with torch.no_grad():
            eager.append(tts.talker.model(x, cache))
    torch.testing.assert_close(eager[1], eager[0], rtol=1e-5, atol=1e-5)


@pytest.mark.usefixtures("no_tf32")  # true fp32 on CUDA too
@pytest.mark.parametrize("kind", ["cv17", "cv06"])
@pytest.mark.parametrize("fold", [True, False], ids=["folded", "plain"])
def test_fused_attention_is_the_same_function(tiny_ckpt: Callable[[str], Path], kind: str, fold: bool) -> None:
    """fp32: a step model whose layers take their attention inputs and attention in one launch where a call has one
    token a slot (kernels/cp_attend.py, interpreted without a GPU) against the two-launch kernels (qk_norm_rope,
    slot_attention) on a copy of the same weights: the Talker's hidden and KV for 3 decode tokens at positions 0,
    1 and 2 of their slots, and all 15 codebooks' logits of the depth loop with forced codes; the fused kernel runs
    in every Talker layer and in passes 1..14, and pass 0 (two tokens a row) keeps the pair."""
    from voxgate.engine.qwen3tts.batch_step import StepModel
    from voxgate.engine.qwen3tts.fused_stack import DecoderOps

    from .test_small_gemm import _talker_state

    tts, fused_tts = _load(tiny_ckpt, kind), _load(tiny_ckpt, kind)
    _far_from_one_norms(tts.talker, fused_tts.talker)
    calls = []

    def counted(*args, **kwargs):
        calls.append(args[0].shape[0])
        return kernel_module("cp_attend").cp_attend(*args, **kwargs)

    ops = replace(DecoderOps.for_device(torch.device(DEVICE), "torch"),
                  qk_norm_rope=kernel_module("qk_norm_rope").qk_norm_rope,
                  attend=kernel_module("slot_attention").slot_attention)
    models = {"pair": StepModel(tts.talker, ops, fold_norms=fold),
              "fused": StepModel(fused_tts.talker, replace(ops, attend_new=counted), fold_norms=fold)}
    rows, hidden = 3, tts.talker.model.codec_embedding.weight.shape[1]
    talker_layers = tts.talker.cfg.layers.num_hidden_layers
    depth_layers = tts.talker.cfg.code_predictor.num_hidden_layers
    h, c0 = torch.randn(rows, hidden, device=DEVICE), torch.randn(rows, hidden, device=DEVICE)
    forced = torch.randint(0, tts.talker.code_predictor.cfg.vocab_size, (rows, 15), device=DEVICE)
    logits = {name: _depth_logits(model, h, c0, forced) for name, model in models.items()}
    assert calls == [rows] * 14 * depth_layers
    for k, (got, want) in enumerate(zip(logits["fused"], logits["pair"], strict=True)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, msg=f"codebook {k + 1}")
    talker_out, states = {}, {}
    for name, model in models.items():
        states[name] = _talker_state(tts, rows)
        x = [torch.randn(rows, hidden, device=DEVICE, generator=torch.Generator(DEVICE).manual_seed(i))
             for i in range(3)]
        with torch.no_grad():
            talker_out[name] = [model.talker_tokens(x[p], states[name], torch.arange(rows, device=DEVICE),
                                                    torch.full((rows,), p, device=DEVICE), one_per_slot=True)
                                for p in range(3)]
    assert len(calls) == 14 * depth_layers + 3 * talker_layers
    for p in range(3):
        torch.testing.assert_close(talker_out["fused"][p], talker_out["pair"][p], rtol=1e-5, atol=1e-5)
    for got, want in zip(states["fused"].k_cache + states["fused"].v_cache,
                         states["pair"].k_cache + states["pair"].v_cache, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["cv17", "cv06"])
def test_an_engine_with_fused_attention_makes_each_streams_codes(tiny_ckpt: Callable[[str], Path], kind: str) -> None:
    """The option end to end (fp32, the kernels' references): an engine built with fuse_attention makes each of
    two streams' greedy codes (the second joining a step later, so that steps with a prompt's tokens, which keep
    the pair, and decode-only steps both run) as the model makes that stream alone."""
    import numpy as np

    from .loop_support import Stream, drive, make_runner, solo_codes

    tts, plain = _load(tiny_ckpt, kind), _load(tiny_ckpt, kind)
    runner = make_runner(tts, fuse_attention=True)
    assert runner.model.talker_stack.ops.attend_new is not None
    streams = [Stream("Hello there.", budget=4, join_step=0, speaker="ryan", non_streaming=False),
               Stream("A second one.", budget=3, join_step=1, speaker="ryan", non_streaming=False)]
    recorder = drive(tts, runner, streams)
    for s in streams:
        np.testing.assert_array_equal(np.stack(recorder.codes[s.codes_id]), solo_codes(plain, s))


def test_the_depth_loop_hands_the_heads_logits_over_uncast(tiny_ckpt: Callable[[str], Path]) -> None:
    """bf16: with float_logits=False the pick gets the heads' bf16 output, whose fp32 values are the cast logits."""
    from voxgate.engine.qwen3tts.batch_step import StepModel
    from voxgate.engine.qwen3tts.fused_stack import DecoderOps

    tts = _load(tiny_ckpt, "cv17", torch.bfloat16)
    model = StepModel(tts.talker, DecoderOps.for_device(torch.device(DEVICE), "torch"))
    rows, hidden = 2, tts.talker.model.codec_embedding.weight.shape[1]
    h, c0 = torch.randn(rows, hidden, device=DEVICE).bfloat16(), torch.randn(rows, hidden, device=DEVICE).bfloat16()
    forced = torch.randint(0, tts.talker.code_predictor.cfg.vocab_size, (rows, 15), device=DEVICE)
    cast, raw = _depth_logits(model, h, c0, forced), _depth_logits(model, h, c0, forced, float_logits=False)
    assert all(lg.dtype == torch.float32 for lg in cast) and all(lg.dtype == torch.bfloat16 for lg in raw)
    for k, (a, b) in enumerate(zip(cast, raw, strict=True)):
        assert torch.equal(a, b.float()), f"codebook {k + 1}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_frames_embedding_in_one_lookup_is_the_talkers(tiny_ckpt: Callable[[str], Path], dtype: torch.dtype) -> None:
    """F(frame) from the joined table equals Talker.frame_embed bit for bit, and the Talker's own tables, now views
    of the joined one, still give it."""
    from voxgate.engine.qwen3tts.batch_step import StepModel
    from voxgate.engine.qwen3tts.fused_stack import DecoderOps

    talker = _load(tiny_ckpt, "cv17", dtype).talker
    v0, v = talker.cfg.layers.vocab_size, talker.code_predictor.cfg.vocab_size
    frames = torch.cat([torch.randint(0, v0, (5, 1), device=DEVICE), torch.randint(0, v, (5, 15), device=DEVICE)], 1)
    frames[0, 1:] = v - 1  # each table's last row: an offset one short would read the next table's first
    with torch.no_grad():
        want = talker.frame_embed(frames)
        model = StepModel(talker, DecoderOps.for_device(torch.device(DEVICE), "torch"))
        assert torch.equal(model.frame_embed(frames), want)
        assert torch.equal(talker.frame_embed(frames), want)
    assert talker.model.codec_embedding.weight.data_ptr() == model.frame_table.data_ptr()


def test_the_predictors_weights_are_stacked_and_the_modules_read_them(tiny_ckpt: Callable[[str], Path]) -> None:
    """The predictor's stack holds each kind of weight once, [L, ...] (what kernels/depth_pass.py walks): the
    modules' weights and the stack's per-layer tuples are views of it, and the eager path still reads the values
    it was loaded with."""
    from voxgate.engine.qwen3tts.batch_step import StepModel
    from voxgate.engine.qwen3tts.fused_stack import DecoderOps

    talker = _load(tiny_ckpt, "cv17").talker
    layers = talker.code_predictor.model.layers
    before = [(m.input_layernorm.weight.clone(), m.self_attn.k_proj.weight.clone(), m.mlp.up_proj.weight.clone())
              for m in layers]
    stack = StepModel(talker, DecoderOps.for_device(torch.device(DEVICE), "torch")).predictor_stack
    assert stack.stacked is not None and all(kind.shape[0] == len(layers) for kind in stack.stacked)
    in_w, qkv, *_, gate_up, _ = stack.stacked
    for i, (m, (norm, k, up)) in enumerate(zip(layers, before, strict=True)):
        assert m.input_layernorm.weight.data_ptr() == in_w[i].data_ptr() == stack.layers[i][0].data_ptr()
        nq = m.self_attn.q_proj.weight.shape[0]
        assert m.self_attn.k_proj.weight.data_ptr() == qkv[i, nq:].data_ptr()
        assert m.mlp.up_proj.weight.data_ptr() == gate_up[i, stack.intermediate:].data_ptr()
        assert torch.equal(m.input_layernorm.weight, norm) and torch.equal(m.self_attn.k_proj.weight, k)
        assert torch.equal(m.mlp.up_proj.weight, up)


def test_the_counter_counts_ops_and_kernels_not_views() -> None:
    from voxgate.engine.qwen3tts.bench.launch_count import LaunchCounter

    counter = LaunchCounter()
    kernel = counter.kernel("swiglu", lambda x: F.silu(x[:, :2]) * x[:, 2:])
    x, w = torch.randn(3, 4), torch.randn(4, 4)
    with counter:
        y = F.linear(x, w)  # a view of w (its transpose), then one mm
        y = kernel(y.view(3, 4).contiguous())  # contiguous: already so, nothing; the kernel: once
        torch.empty(5)
    assert counter.ops == {"aten.mm": 1, "triton:swiglu": 1}, counter.ops
    assert y.shape == (3, 2)


@pytest.mark.parametrize("kind", ["cv17", "cv06"])
def test_each_path_takes_its_launches_off_a_decode_step(tiny_ckpt: Callable[[str], Path], kind: str) -> None:
    """bf16, 1 row: the SwiGLU kernel one launch a layer of the Talker and of each of the depth loop's 15 passes;
    the tables one GEMM a pass 1..14 where there is a projection (1.7B), none where there is not (0.6B); the uncast
    logits one launch a depth pass; the draws' table rows one lookup a pass 1..14. The kernels the step runs are
    counted as one launch each."""
    from voxgate.engine.qwen3tts.bench.launch_count import VARIANTS, step_launches

    talker = _load(tiny_ckpt, kind, torch.bfloat16).talker.cpu()
    layers, depth_layers = talker.cfg.layers.num_hidden_layers, talker.cfg.code_predictor.num_hidden_layers
    projects = isinstance(talker.code_predictor.small_to_mtp_projection, torch.nn.Linear)
    counts = {name: step_launches(talker, 1, **options) for name, options in VARIANTS.items()}
    total = {name: sum(c.values()) for name, c in counts.items()}
    saved = {"swiglu kernel": layers + 15 * depth_layers, "folded depth input": 14 if projects else 0,
             "no logits cast": 15}
    for name, n in saved.items():
        assert total["before"] - total[name] == n, (name, total)
    assert total["before"] - total["after"] == sum(saved.values()), total
    after = counts["after"]
    assert after["triton:swiglu"] == layers + 15 * depth_layers and after["triton:sample_draw"] == 16
    assert after["aten.silu"] == 1  # the text projection's, outside the stacks
    # depth = persistent: passes 1..14 one launch each and their heads the fused one, instead of the stack's first
    # norm, 9 launches a layer and the head's GEMM
    persistent = counts["persistent depth"]
    assert persistent["triton:depth_pass"] == persistent["triton:cp_linear"] == 14, persistent
    assert total["after"] - total["persistent depth"] == 14 * 9 * depth_layers, total
    # folded norms: the two norms of every layer gone (the first layer's input norm and the final norm stay one
    # launch a stack), the residual adds inside the GEMMs (addmm_ in place)
    folded, all_layers = counts["folded norms"], layers + 15 * depth_layers
    assert total["after"] - total["folded norms"] == 2 * all_layers, total
    assert folded["triton:add_rms_norm"] == 1 + 15 and folded["aten.addmm_"] == 2 * all_layers, folded
    assert folded["triton:qk_norm_rope"] == folded["triton:swiglu"] == all_layers, folded
    # fused attention: one launch a layer fewer in the Talker and in passes 1..14 (pass 0 has two tokens a row)
    fused = counts["fused attention"]
    assert total["folded norms"] - total["fused attention"] == layers + 14 * depth_layers, total
    assert fused["triton:cp_attend"] == layers + 14 * depth_layers, fused
    assert fused["triton:qk_norm_rope"] == fused["triton:slot_attention"] == depth_layers, fused
    # codebook 0's row for the predictor, passes 1..14's inputs, the frame's (one lookup), the text's
    assert after["aten.embedding"] == 1 + 14 + 1 + 1 and after["aten.stack"] == 1  # the codes' stack only
    # the draw writes passes 1..14's inputs (where they are a table: the folded projection, or the 0.6B's own
    # embeddings): their 14 lookups gone, the draws as many as before
    gathers = counts["draw gathers"]
    assert total["fused attention"] - total["draw gathers"] == 14, total
    assert gathers["aten.embedding"] == 1 + 1 + 1 and gathers["triton:sample_draw"] == 16, gathers
    # small_gemm's kernels (gemv_all, as on a Hopper GPU): gate|up and SwiGLU one launch a layer; then the
    # predictor's 15 heads normalize as they project, the stack's final norm gone from every pass
    small, normed = counts["small gemm"], counts["normed heads"]
    assert total["draw gathers"] - total["small gemm"] == layers + 15 * depth_layers, total
    assert small["triton:gemv_swiglu"] == layers + 15 * depth_layers and "triton:swiglu" not in small, small
    assert total["small gemm"] - total["normed heads"] == 15, total
    assert normed["triton:add_rms_norm"] == 1, normed  # the Talker's final norm (its head and the predictor's input)
    # the frame epilogue: the frame's cat, the ring's index and scatter, the offsets' add, the frame's lookup and sum,
    # the text row's add and the scatter into next_input in one launch; the text table: the projection's lookup and
    # MLP (two GEMMs with bias, the SiLU) gone, the kernel looks the row up itself
    epilogue, table = counts["frame epilogue"], counts["text table"]
    assert total["normed heads"] - total["frame epilogue"] == 7 and epilogue["triton:frame_epilogue"] == 1, total
    for op in ("aten.remainder", "aten.sum", "aten.index_copy_"):
        assert normed[op] == 1 and op not in epilogue, op
    assert normed["aten.index_put_"] - epilogue["aten.index_put_"] == 1  # the ring's (the seen mark stays)
    assert total["frame epilogue"] - total["text table"] == 4, total
    assert epilogue["aten.addmm"] == 2 and epilogue["aten.silu"] == 1, epilogue
    assert "aten.addmm" not in table and "aten.silu" not in table, table
    assert epilogue["aten.embedding"] - table["aten.embedding"] == 1, table
    # codebook 0's rules (the seen rows' gather, the casts, penalty, EOS block, suppression), its seen mark and its
    # embedding row in its draw's launch: 17 launches fewer, the draws as many
    drawn = counts["codebook 0 drawn"]
    assert total["text table"] - total["codebook 0 drawn"] == 17, total
    assert drawn["triton:sample_draw"] == 16 and drawn["aten.embedding"] == 0 and "aten.masked_fill" not in drawn


@pytest.mark.parametrize("kind", ["cv17", "cv06"])
def test_an_engine_with_folded_norms_makes_each_streams_codes(tiny_ckpt: Callable[[str], Path], kind: str) -> None:
    """The option end to end (fp32, the kernels' references): an engine built with fold_norms makes each of two
    streams' greedy codes as the unfolded model makes that stream alone (a second copy of the checkpoint, norm
    weights far from ones in both)."""
    import numpy as np

    from .loop_support import Stream, drive, make_runner, solo_codes

    tts, plain = _load(tiny_ckpt, kind), _load(tiny_ckpt, kind)
    _far_from_one_norms(tts.talker, plain.talker)
    runner = make_runner(tts, fold_norms=True)
    assert runner.model.talker_stack.folded and runner.model.predictor_stack.folded
    streams = [Stream("Hello there.", budget=4, join_step=0, speaker="ryan", non_streaming=False),
               Stream("A second one.", budget=3, join_step=1, speaker="ryan", non_streaming=False)]
    recorder = drive(tts, runner, streams)
    for s in streams:
        np.testing.assert_array_equal(np.stack(recorder.codes[s.codes_id]), solo_codes(plain, s))


def test_fold_norms_is_never_taken_in_fp16() -> None:
    """The option folds in bf16 and fp32 and never in fp16 (an unnormalized projection could pass its range)."""
    from voxgate.engine.qwen3tts.runner_config import RunnerConfig

    on, off = RunnerConfig(fold_norms=True), RunnerConfig(fold_norms=False)
    assert on.folds_norms(torch.bfloat16) and on.folds_norms(torch.float32) and not on.folds_norms(torch.float16)
    assert not off.folds_norms(torch.bfloat16) and not off.folds_norms(torch.float32)

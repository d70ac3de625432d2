"""The `small_gemm` option (small_gemm.py): projections of at most 16 rows through kernels/gemv.py, on a tiny
checkpoint. The kernel runs in Triton's interpreter here; its own tests against F.linear are in
tests/kernel/test_gemv.py."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("triton")

from triton_mode import DEVICE, kernel_module


@pytest.fixture(scope="module")
def gemv() -> ModuleType:
    return kernel_module("gemv")


def test_few_rows_takes_the_kernel_up_to_its_row_limit_only() -> None:
    from voxgate.engine.qwen3tts.small_gemm import FewRows, linears

    calls: list[int] = []

    def kernel(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None, pdl: bool = False) -> torch.Tensor:
        calls.append(x.shape[0])
        return F.linear(x, w, b)

    linear = FewRows(kernel, 16)
    w = torch.randn(5, 8)
    for rows in (1, 16, 17, 64):
        assert linear(torch.randn(rows, 8), w).shape == (rows, 5)
    assert calls == [1, 16]
    narrow = FewRows(kernel, 16, fast=lambda m, n, k, pair, value_bytes: k <= 4)
    assert narrow(torch.randn(1, 8), w).shape == (1, 5) and calls == [1, 16]
    assert linears("cublas", True) == (F.linear, F.linear)
    predictor, talker = linears("gemv", False)
    assert predictor is not F.linear and talker is F.linear
    predictor, talker = linears("gemv_all", False)
    assert isinstance(predictor, FewRows) and isinstance(talker, FewRows) and predictor.gemv is talker.gemv
    assert (predictor.max_rows, talker.max_rows) == (16, 1)  # the Talker's 2-16 rows: cuBLAS (TALKER_ROWS)
    assert linears("gemv", False, max_rows=1)[0].max_rows == 1


def test_the_defaults_send_the_predictors_2_16_rows_through_the_kernel_and_the_talkers_one_row() -> None:
    """gemv_rows = 16 by default (measured: c = 8 118.9 against 116.4 audio-s/s with 1 on an H100): a runner
    built from the defaults takes the kernel for the predictor's bf16 calls of 2-16 rows, the Talker's at one row."""
    from voxgate.engine.qwen3tts.runner_config import RunnerConfig
    from voxgate.engine.qwen3tts.small_gemm import linears

    predictor, talker = linears("gemv_all", False, max_rows=RunnerConfig().gemv_rows)
    for rows in (2, 8, 16):
        x, w = torch.empty(rows, 1024, dtype=torch.bfloat16), torch.empty(4096, 1024, dtype=torch.bfloat16)
        assert predictor.takes(x, w) and not talker.takes(x, w), rows
    assert talker.takes(torch.empty(1, 1024, dtype=torch.bfloat16), torch.empty(4096, 1024, dtype=torch.bfloat16))


def test_gemv_split_and_talker_rows_route_the_talkers_8_rows_through_the_split_kernel() -> None:
    """gemv_split and gemv_talker_rows (engine options; the Talker's rows off as shipped): with K cut above 16,384
    values a program (the default), the Talker's down (K 6,144, too wide whole) fits, and with gemv_talker_rows = 16
    its 8-row calls take the rows kernel; the reference path routes the same calls (so that the CPU runs what the
    GPU would). Each passes the rule to every launch."""
    from voxgate.engine.qwen3tts.runner_config import RunnerConfig
    from voxgate.engine.qwen3tts.small_gemm import linears

    config = RunnerConfig(gemv_split=16384, gemv_talker_rows=16)
    x, down = torch.empty(8, 6144, dtype=torch.bfloat16), torch.empty(2048, 6144, dtype=torch.bfloat16)
    for use_triton in (True, False):
        predictor, talker = linears("gemv_all", use_triton, max_rows=config.gemv_rows,
                                    split_above=config.gemv_split, talker_rows=config.gemv_talker_rows)
        assert talker.max_rows == 16 and talker.takes(x, down) and predictor.takes(x, down), use_triton
        shipped = linears("gemv_all", use_triton, max_rows=16, talker_rows=16)[1]
        assert not shipped.takes(x, down)  # whole rows of K 6,144 do not fit
        if use_triton:
            assert talker.gemv.keywords == talker.gemv_add.keywords == {"split_above": 16384, "lanes": False}
    for bad in (100, 3000, -1):
        with pytest.raises(ValueError, match="gemv_split"):
            RunnerConfig(gemv_split=bad)
    with pytest.raises(ValueError, match="gemv_talker_rows"):
        RunnerConfig(gemv_talker_rows=0)
    assert (RunnerConfig().gemv_split, RunnerConfig().gemv_talker_rows) == (16384, 1)


def test_gemv_layout_lanes_takes_the_lanes_kernel_where_it_fits() -> None:
    """gemv_layout = lanes (an engine option, the default): the code predictor's calls pass lanes=True, the
    Talker's lanes=False (its one-row projections read slower through it), and 2-16 rows keep their routing: the
    Talker's q|k|v and down at 8 rows (with gemv_talker_rows = 16) the rows kernel, the predictor's down too; the
    reference path routes alike. A layout other than tiles or lanes is refused."""
    from voxgate.engine.qwen3tts.runner_config import RunnerConfig
    from voxgate.engine.qwen3tts.small_gemm import linears
    from voxgate.kernels import gemv

    config = RunnerConfig(gemv_layout="lanes", gemv_talker_rows=16)
    bf16 = torch.bfloat16
    for use_triton in (True, False):
        predictor, talker = linears("gemv_all", use_triton, max_rows=config.gemv_rows,
                                    split_above=config.gemv_split, talker_rows=config.gemv_talker_rows,
                                    lanes=config.gemv_layout == "lanes")
        x = torch.empty(8, 2048, dtype=bf16)
        assert talker.takes(x, torch.empty(4096, 2048, dtype=bf16)), use_triton
        assert talker.takes(torch.empty(8, 6144, dtype=bf16), torch.empty(2048, 6144, dtype=bf16))
        if use_triton:
            assert predictor.gemv.keywords == {"split_above": 16384, "lanes": True}
            assert talker.gemv.keywords == {"split_above": 16384, "lanes": False}
    assert gemv.lanes_tiles(1024, 1024).fits and not gemv.lanes_tiles(4096, 1024, rows=8).fits
    assert gemv.fast(8, 1024, 3072, lanes=True)
    with pytest.raises(ValueError, match="gemv_layout"):
        RunnerConfig(gemv_layout="rows")
    assert RunnerConfig().gemv_layout == "lanes"


def test_auto_takes_the_kernel_only_on_a_hopper_gpu_running_triton(monkeypatch: pytest.MonkeyPatch) -> None:
    """small_gemm = auto (the default): gemv_all where it was measured faster (Hopper, the step's Triton kernels),
    cuBLAS on the CPU, on other GPUs and with attention = torch; an explicit choice stays as given."""
    from voxgate.engine.qwen3tts.small_gemm import resolve

    cuda = torch.device("cuda", 0)
    assert resolve("auto", torch.device("cpu"), False) == "cublas"
    for capability, use_triton, want in [((9, 0), True, "gemv_all"), ((9, 0), False, "cublas"),
                                         ((8, 0), True, "cublas"), ((10, 0), True, "cublas")]:
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device, cap=capability: cap)
        assert resolve("auto", cuda, use_triton) == want, (capability, use_triton)
    for choice in ("cublas", "gemv", "gemv_all"):
        assert resolve(choice, cuda, True) == choice


def test_few_rows_leaves_cublas_the_shapes_the_rows_kernel_cannot_hold() -> None:
    """kernels/gemv.py's `fast` routes the calls (the reference's too, so that both split alike): one row up to
    MAX_K; 2-16 rows only where the MMA rows kernel holds whole rows of W (K <= 4,096; gate|up's pair K <= 2,048),
    so every projection of the predictor takes the kernel at 8 rows in bf16 and the Talker's down (K 6,144) cuBLAS.
    In fp32 (exact test runs) the predictor's o and down at 2-16 rows take cuBLAS (shared memory: gemv.py)."""
    from voxgate.engine.qwen3tts.small_gemm import linears
    from voxgate.kernels import gemv

    def empty(*shape: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
        return torch.empty(*shape, dtype=dtype)

    small = linears("gemv_all", False)[0]
    for (m, k, n), takes in {(1, 3072, 1024): True, (1, 6144, 2048): True, (8, 1024, 4096): True,
                             (8, 2048, 1024): True, (8, 2048, 4096): True, (8, 3072, 1024): True,
                             (16, 6144, 2048): False,
                             (17, 1024, 4096): False, (1, gemv.MAX_K + 1, 64): False}.items():
        assert small.takes(empty(m, k), empty(n, k)) is takes, (m, k, n)
    assert small.takes(empty(8, 2048), empty(12288, 2048), pair=True)
    assert not small.takes(empty(8, 4096), empty(6144, 4096), pair=True)
    assert small.takes(empty(1, 2048), empty(6144, 2048), pair=True)
    for (m, k, n), takes in {(8, 1024, 4096): True, (8, 2048, 1024): False, (8, 3072, 1024): False,
                             (1, 3072, 1024): True}.items():
        assert small.takes(empty(m, k, dtype=torch.float32), empty(n, k, dtype=torch.float32)) is takes, (m, k, n)


@pytest.mark.slow
@pytest.mark.parametrize("fold,fused,lanes", [(False, False, False), (True, True, False), (True, True, True)],
                         ids=["plain", "folded-fused-swiglu", "folded-fused-swiglu-lanes"])
def test_depth_loop_and_talker_through_gemv_equal_f_linear(tiny_ckpt: Callable[[str], Path], gemv: ModuleType,
                                                          fold: bool, fused: bool, lanes: bool) -> None:
    """3 rows (pass 0 at 6 tokens, then 3): every codebook's logits of the predictor's depth loop, with its stack,
    input projection (1.7B: with bias) and heads through the kernel, against F.linear's; the Talker's stack on 3
    tokens too; with `fused`, gate|up and SwiGLU in one launch (on a folded stack, scaled by the residual's RMS).
    `lanes`: every call through the lanes kernel (gemv_layout = lanes). fp32: the sums differ only in order."""
    from voxgate.engine.qwen3tts.batch_step import StepModel
    from voxgate.engine.qwen3tts.fused_stack import DecoderOps
    from voxgate.engine.qwen3tts.model.generate import Qwen3TTS
    from voxgate.engine.qwen3tts.small_gemm import FewRows

    tts = Qwen3TTS.from_pretrained(tiny_ckpt("cv17"), dtype=torch.float32, device=DEVICE, progress=False)
    ops = DecoderOps.for_device(torch.device(DEVICE))
    layout = {"lanes": lanes}
    small = FewRows(partial(gemv.gemv, **layout), gemv.MAX_ROWS, partial(gemv.gemv_add_, **layout) if fused else None,
                    gemv_swiglu=partial(gemv.gemv_swiglu, **layout) if fused else None,
                    fast=partial(gemv.fast, lanes=lanes))
    models = {"cublas": StepModel(tts.talker, ops, fold_norms=fold),
              "gemv": StepModel(tts.talker, ops, None, small, small, fold_norms=fold)}
    rows, hidden = 3, tts.talker.model.codec_embedding.weight.shape[1]
    h, c0 = torch.randn(rows, hidden, device=DEVICE), torch.randn(rows, hidden, device=DEVICE)
    forced = torch.randint(0, tts.talker.code_predictor.cfg.vocab_size, (rows, 15), device=DEVICE)
    logits: dict[str, list[torch.Tensor]] = {}
    talker_out: dict[str, torch.Tensor] = {}
    for name, model in models.items():
        seen: list[torch.Tensor] = []

        def pick(lg: torch.Tensor, seen: list[torch.Tensor] = seen) -> torch.Tensor:
            seen.append(lg)
            return forced[:, len(seen) - 1]

        state = _talker_state(tts, rows)
        with torch.no_grad():
            assert torch.equal(model.depth_loop(h, c0, pick), forced)
            talker_out[name] = model.talker_tokens(h, state, torch.arange(rows, device=DEVICE),
                                                   torch.zeros(rows, dtype=torch.long, device=DEVICE))
        logits[name] = seen
    for k, (got, want) in enumerate(zip(logits["gemv"], logits["cublas"], strict=True)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4, msg=f"codebook {k + 1}")
    torch.testing.assert_close(talker_out["gemv"], talker_out["cublas"], rtol=1e-4, atol=1e-4)


def _talker_state(tts, rows: int):
    """A SlotState with just the Talker's KV stores and RoPE tables for `rows` slots of 4 positions."""
    from types import SimpleNamespace

    from voxgate.engine.qwen3tts.model.layers import rope_tables

    lc = tts.cfg.talker.layers
    cos, sin = rope_tables(torch.arange(4, device=DEVICE), lc.head_dim, lc.rope_theta, torch.float32)
    store = [torch.zeros(rows, lc.num_key_value_heads, 4, lc.head_dim, device=DEVICE)
             for _ in range(2 * lc.num_hidden_layers)]
    return SimpleNamespace(k_cache=store[::2], v_cache=store[1::2], cos=cos, sin=sin)


@pytest.mark.slow
def test_an_engine_with_small_gemm_gemv_makes_each_streams_codes(tiny_ckpt: Callable[[str], Path],
                                                                 gemv: ModuleType,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The option end to end: with attention=triton (the step's kernels, interpreted on the CPU: ~20 s for this one
    stream of 3 frames; compiled on a GPU), gemv_all takes kernels/gemv.py for the predictor's projections and the
    Talker's (decode-only steps and codebook 0's head, at one row: TALKER_ROWS); the greedy codes are the stream's
    alone. The steps run eagerly, so that each call reaches the counter (a graph's replay calls nothing)."""
    from voxgate.engine.qwen3tts.model.generate import Qwen3TTS

    from .loop_support import Stream, drive, make_runner, solo_codes

    # the step's kernels, the draw's and the frame epilogue's (auto takes them where the step runs Triton) and those
    # imported beside them
    for name in ("add_rms_norm", "qk_norm_rope", "slot_attention", "swiglu", "cp_linear", "cp_attend", "sample_draw",
                 "frame_epilogue"):
        kernel_module(name)
    tts = Qwen3TTS.from_pretrained(tiny_ckpt("cv17"), dtype=torch.float32, device=DEVICE, progress=False)
    calls: list[int] = []
    kernel = gemv.gemv

    def counted(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None, pdl: bool = False,
                **rest: object) -> torch.Tensor:
        calls.append(x.shape[0])
        return kernel(x, w, b, pdl=pdl, **rest)

    # the runner takes the module's kernel when it is built; gemv_add_ calls the module's gemv (with the residual),
    # which is this one while it is built
    gemv.gemv = counted
    try:
        runner = make_runner(tts, small_gemm="gemv_all", gemv_rows=16, attention="triton", enforce_eager=True)
    finally:
        gemv.gemv = kernel
    talker, predictor = runner.model.talker_linear, runner.model.predictor_linear
    assert runner.ops.uses_triton and (talker.max_rows, predictor.max_rows) == (1, 16)
    assert all(getattr(m.gemv, "func", m.gemv) is counted for m in (talker, predictor))  # with gemv_split's rule
    calls.clear()  # from here on, the steps only
    stream = Stream("Hello there.", budget=3, join_step=0, speaker="ryan", non_streaming=False, schedule=(2,))
    recorder = drive(tts, runner, [stream])
    np.testing.assert_array_equal(np.stack(recorder.codes[stream.codes_id]), solo_codes(tts, stream))
    # pass 0 at 2 tokens, passes 1..14, the heads and the Talker's decode-only steps at 1 row
    assert {1, 2} <= set(calls) and max(calls) <= 16, sorted(set(calls))


def test_auto_turns_pdl_off_where_a_launch_with_it_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """pdl = auto (the default) on a GPU that claims PDL (sm_90, Triton >= 3.3) whose driver refuses the launch:
    the probe's error means PDL off, once per device, and the engine starts; pdl = on still asks for it."""
    from voxgate.engine.qwen3tts import runner_config
    from voxgate.engine.qwen3tts.runner_config import RunnerConfig
    from voxgate.kernels import utils

    probes: list[object] = []

    def refused(device: object) -> bool:
        probes.append(device)
        raise RuntimeError("CUDA driver: launch attribute not supported")

    monkeypatch.setattr(utils, "pdl_available", lambda device: True)
    monkeypatch.setattr(runner_config, "_probe_pdl", refused)
    monkeypatch.setattr(runner_config, "_PDL_WORKS", {})
    gpu = torch.device("cuda", 3)
    assert RunnerConfig().uses_pdl(gpu, triton_ops=True) is False
    assert RunnerConfig(pdl="auto").uses_pdl(gpu, triton_ops=True) is False and len(probes) == 1
    assert RunnerConfig(pdl="on").uses_pdl(gpu, triton_ops=True) is True
    monkeypatch.setattr(runner_config, "_probe_pdl", lambda device: True)
    assert runner_config.pdl_works(torch.device("cuda", 4)) and not runner_config.pdl_works(gpu)


@pytest.mark.gpu
@pytest.mark.skipif(DEVICE != "cuda", reason="needs a CUDA GPU")
def test_the_pdl_probe_runs_where_pdl_is_available() -> None:
    """runner_config.pdl_works (what `pdl = auto` asks): its two dependent gemv launches with PDL run, agree with
    F.linear, and with pdl_available on this GPU (Hopper: both true; older: both false, no launch tried)."""
    from voxgate.engine.qwen3tts.runner_config import pdl_works
    from voxgate.kernels.utils import pdl_available

    cuda = torch.device("cuda")
    assert pdl_works(cuda) == pdl_available(cuda)


def test_the_pdl_option_is_asked_for_or_taken_where_it_runs() -> None:
    """pdl = on where it cannot run is one clear error (never dropped silently); auto takes it only on a Hopper GPU
    with the step's Triton kernels; the ops say they launch with it, and /health's kernel name stays the kernel's."""
    from voxgate.engine.qwen3tts.fused_stack import DecoderOps
    from voxgate.engine.qwen3tts.runner_config import RunnerConfig

    cpu = torch.device("cpu")
    assert not RunnerConfig(pdl="auto").uses_pdl(cpu, triton_ops=True)
    assert RunnerConfig().pdl == "auto" and not RunnerConfig().uses_pdl(cpu, triton_ops=True)
    with pytest.raises(ValueError, match="Triton kernels"):
        RunnerConfig(pdl="on").uses_pdl(cpu, triton_ops=False)
    with pytest.raises(ValueError, match="Hopper"):
        RunnerConfig(pdl="on").uses_pdl(cpu, triton_ops=True)
    with pytest.raises(ValueError, match="pdl must be"):
        RunnerConfig(pdl="yes")
    with pytest.raises(ValueError, match="pdl=late needs a Hopper"):
        RunnerConfig(pdl="late").uses_pdl(cpu, triton_ops=True)
    with pytest.raises(ValueError, match="gemv_rows"):
        RunnerConfig(gemv_rows=17)
    assert RunnerConfig(pdl="off").uses_pdl(cpu, triton_ops=True) is False
    plain, launched = DecoderOps.for_device(cpu, "triton"), DecoderOps.for_device(cpu, "triton", pdl=True)
    assert plain.pdl is False and launched.pdl is True
    assert DecoderOps.for_device(cpu, "triton", pdl="late").pdl == "late"
    assert plain.attend_name == launched.attend_name == "slot_attention"
    assert DecoderOps.for_device(cpu).attend_name == "slot_attention_ref"


def test_codec_gemm_gives_the_fused_codec_the_kernel(gemv: ModuleType, tiny_ckpt: Callable[[str], Path]) -> None:
    """codec_gemm = gemv builds the fused codec with small_gemm's FewRows on kernels/gemv.py (its audio against the
    reference: tests/qwen3tts/test_codec_fused.py); auto follows small_gemm; cublas, or the plain codec, keeps
    F.linear; gemv without the step's Triton kernels is refused, not dropped."""
    import importlib

    from voxgate.engine.qwen3tts.model.generate import Qwen3TTS
    from voxgate.engine.qwen3tts.runner import ModelRunner
    from voxgate.engine.qwen3tts.runner_config import RunnerConfig
    from voxgate.engine.qwen3tts.small_gemm import FewRows

    for name in ("add_rms_norm", "qk_norm_rope", "slot_attention", "swiglu", "cp_linear", "cp_attend", "sample_draw",
                 "frame_epilogue", "causal_conv", "conv_tma", "codec_norms", "ring_attention"):
        kernel_module(name)
    importlib.reload(importlib.import_module("voxgate.engine.qwen3tts.codec.codec_fused"))
    tts = Qwen3TTS.from_pretrained(tiny_ckpt("cv17"), dtype=torch.float32, device=DEVICE, progress=False)

    def codec_linear(**options: object) -> object:  # built, not captured: the wiring only
        return ModelRunner(tts, RunnerConfig(row_buckets=(1,), prefill_buckets=(8,), max_positions=64,
                                             codec="fused", **options), num_slots=3).codec.linear

    linear = codec_linear(codec_gemm="gemv", attention="triton", small_gemm="cublas")
    assert isinstance(linear, FewRows) and linear.max_rows == 16 and linear.gemv_swiglu is not None
    assert getattr(linear.gemv, "func", linear.gemv) is gemv.gemv
    assert isinstance(codec_linear(codec_gemm="auto", attention="triton", small_gemm="gemv_all"), FewRows)
    assert codec_linear(codec_gemm="auto", attention="triton", small_gemm="cublas") is None
    assert codec_linear(attention="triton", small_gemm="gemv_all") is None  # the default: cublas
    with pytest.raises(ValueError, match="codec_gemm=gemv needs the step's Triton kernels"):
        codec_linear(codec_gemm="gemv", attention="torch")
    with pytest.raises(ValueError, match="codec_gemm must be"):
        RunnerConfig(codec_gemm="fast")

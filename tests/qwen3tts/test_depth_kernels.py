"""The code predictor's depth loop through the fused kernels (kernels/cp_linear.py, cp_attend.py, sample_draw.py)
and through the persistent pass (kernels/depth_pass.py, one phase a launch where interpreted) against the fused
stack's layers on a tiny checkpoint; each kernel's own tests against its reference are in tests/kernel/."""

from __future__ import annotations

from types import ModuleType

import pytest
import torch

pytest.importorskip("triton")

from triton_mode import DEVICE, kernel_module


@pytest.fixture(scope="module")
def linear() -> ModuleType:
    return kernel_module("cp_linear")


@pytest.fixture(scope="module")
def attend() -> ModuleType:
    return kernel_module("cp_attend")


@pytest.fixture(scope="module")
def draw() -> ModuleType:
    return kernel_module("sample_draw")


@pytest.fixture(scope="module")
def depth_pass() -> ModuleType:
    return kernel_module("depth_pass")


# 1.7B projects into the predictor's width, 0.6B does not (interpreted: 1.7B only, ~30 s)
@pytest.mark.slow
@pytest.mark.parametrize("kind", ["cv17", "cv06"] if DEVICE == "cuda" else ["cv17"])
@pytest.mark.parametrize("depth", ["fused", "persistent"])
def test_fused_depth_loop_equals_the_layers(tiny_ckpt, linear: ModuleType, attend: ModuleType, draw: ModuleType,
                                            depth_pass: ModuleType, kind: str, depth: str) -> None:
    """The whole depth loop for 3 rows on a tiny checkpoint (fp32): passes 1..14 through the fused kernels, or
    through the persistent pass, against the fused stack's layers, every codebook's logits, on the same forced
    codes. Interpreted, the persistent case takes the head's reference (the fused case tests the head kernel)."""
    from voxgate.engine.qwen3tts.batch_step import StepModel
    from voxgate.engine.qwen3tts.depth_fused import DepthOps
    from voxgate.engine.qwen3tts.fused_stack import DecoderOps
    from voxgate.engine.qwen3tts.model.generate import Qwen3TTS

    tts = Qwen3TTS.from_pretrained(tiny_ckpt(kind), dtype=torch.float32, device=DEVICE, progress=False)
    ops = DecoderOps.for_device(torch.device(DEVICE))
    kernels = DepthOps(linear.cp_linear, attend.cp_attend, draw.sample_draw, depth_pass.depth_pass)
    if depth == "persistent" and DEVICE != "cuda":
        kernels = DepthOps(linear.cp_linear_ref, attend.cp_attend_ref, draw.sample_draw, depth_pass.depth_pass)
    models = {"layers": StepModel(tts.talker, ops),
              depth: StepModel(tts.talker, ops, kernels, persistent=depth == "persistent")}
    rows, hidden = 3, tts.talker.model.codec_embedding.weight.shape[1]
    deep = models[depth].depth_for(rows)
    assert deep is not None and (deep is models[depth].persistent_depth) == (depth == "persistent")
    assert models[depth].depth_for(17) is (None if depth == "persistent" else deep)  # above 16 rows: the layers
    h = torch.randn(rows, hidden, device=DEVICE)
    c0 = torch.randn(rows, hidden, device=DEVICE)
    forced = torch.randint(0, tts.talker.code_predictor.cfg.vocab_size, (rows, 15), device=DEVICE)
    logits: dict[str, list[torch.Tensor]] = {}
    for name, model in models.items():
        seen: list[torch.Tensor] = []

        def pick(lg: torch.Tensor, seen: list[torch.Tensor] = seen) -> torch.Tensor:
            seen.append(lg)
            return forced[:, len(seen) - 1]

        with torch.no_grad():
            codes = model.depth_loop(h, c0, pick)
        assert torch.equal(codes, forced)
        logits[name] = seen
    for k, (got, want) in enumerate(zip(logits[depth], logits["layers"], strict=True)):
        assert got.dtype == torch.float32
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4, msg=f"codebook {k + 1}")

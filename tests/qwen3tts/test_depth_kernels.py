"""The code predictor's depth loop through the fused kernels (kernels/cp_linear.py, cp_attend.py, sample_draw.py)
against the fused stack's layers on a tiny checkpoint; each kernel's own tests against its reference are in
tests/kernel/."""

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


# 1.7B projects into the predictor's width, 0.6B does not (interpreted: 1.7B only, ~30 s)
@pytest.mark.slow
@pytest.mark.parametrize("kind", ["cv17", "cv06"] if DEVICE == "cuda" else ["cv17"])
def test_fused_depth_loop_equals_the_layers(tiny_ckpt, linear: ModuleType, attend: ModuleType, draw: ModuleType,
                                            kind: str) -> None:
    """The whole depth loop for 3 rows on a tiny checkpoint (fp32): passes 1..14 through the fused kernels against
    the fused stack's layers, every codebook's logits, on the same forced codes."""
    from voxgate.engine.qwen3tts.batch_step import StepModel
    from voxgate.engine.qwen3tts.depth_fused import DepthOps
    from voxgate.engine.qwen3tts.fused_stack import DecoderOps
    from voxgate.engine.qwen3tts.model.generate import Qwen3TTS

    tts = Qwen3TTS.from_pretrained(tiny_ckpt(kind), dtype=torch.float32, device=DEVICE, progress=False)
    ops = DecoderOps.for_device(torch.device(DEVICE))
    models = {"layers": StepModel(tts.talker, ops),
              "fused": StepModel(tts.talker, ops, DepthOps(linear.cp_linear, attend.cp_attend, draw.sample_draw))}
    rows, hidden = 3, tts.talker.model.codec_embedding.weight.shape[1]
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
    for k, (got, want) in enumerate(zip(logits["fused"], logits["layers"], strict=True)):
        assert got.dtype == torch.float32
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4, msg=f"codebook {k + 1}")

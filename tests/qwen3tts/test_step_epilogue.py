"""A decode step's last writes (kernels/frame_epilogue.py: each row's ring entry and its stream's next Talker
input in one launch) and the trailing text's rows from the table projected at load (batch_step.projected_text),
each against the plain ops it replaces on tiny checkpoints. What each takes off a step is counted in
test_step_launches.py; the engine end to end in test_engine_loop.py's free-running case with both."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton")

from triton_mode import DEVICE, kernel_module

from .test_step_launches import _load


@pytest.mark.usefixtures("no_tf32")  # true fp32 on CUDA too
@pytest.mark.parametrize("kind", ["cv17", "cv06"])
@pytest.mark.parametrize("table", [True, False], ids=["text-table", "text-mlp"])
def test_the_frame_epilogue_writes_what_the_plain_ops_write(tiny_ckpt: Callable[[str], Path], kind: str,
                                                            table: bool) -> None:
    """fp32, 3 rows in scattered slots, forced codes: a step's frame through kernels/frame_epilogue.py (interpreted
    without a GPU), with the projected text table or this step's projected rows, against the plain ops: the same
    frames, the same ring (every other entry untouched), and each stream's next Talker input within the sum's
    rounding (every other slot's untouched)."""
    from voxgate.engine.qwen3tts.batch_step import (
        SampledRows,
        SamplingFeatures,
        SlotState,
        StepModel,
        projected_text,
        sample_frames,
    )
    from voxgate.engine.qwen3tts.fused_stack import DecoderOps
    from voxgate.engine.qwen3tts.model.sampling import NUM_PARAMS

    tts = _load(tiny_ckpt, kind)
    talker, cfg = tts.talker, tts.talker.cfg
    ops = DecoderOps.for_device(torch.device(DEVICE), "torch")
    plain, fast = StepModel(talker, ops), StepModel(talker, ops)
    fast.epilogue = kernel_module("frame_epilogue").frame_epilogue
    fast.text_table = projected_text(talker) if table else None
    hidden, slots_total = cfg.layers.hidden_size, 6
    slots = torch.tensor([4, 1, 3], device=DEVICE)
    forced = torch.cat([torch.randint(0, cfg.layers.vocab_size - 1024, (3, 1), device=DEVICE),
                        torch.randint(0, cfg.code_predictor.vocab_size, (3, 15), device=DEVICE)], dim=1)
    rows = SampledRows(slots, torch.tensor([3, 70, 5], device=DEVICE),
                       torch.randint(0, cfg.text_vocab_size, (3,), device=DEVICE), forced=forced,
                       force=torch.ones(3, dtype=torch.bool, device=DEVICE))
    h = torch.randn(3, hidden, device=DEVICE)
    suppress = torch.zeros(cfg.layers.vocab_size, dtype=torch.bool, device=DEVICE)
    ring0 = torch.randint(0, 9, (slots_total, 4, 16), device=DEVICE)
    next0 = torch.randn(slots_total, hidden, device=DEVICE)
    out = {}
    for name, model in {"plain": plain, "fast": fast}.items():
        state = SlotState(k_cache=[], v_cache=[], cos=torch.empty(0), sin=torch.empty(0), next_input=next0.clone(),
                          seen=torch.zeros(slots_total, cfg.layers.vocab_size, dtype=torch.bool, device=DEVICE),
                          params=torch.zeros(slots_total, NUM_PARAMS, device=DEVICE),
                          x_vector=torch.zeros(slots_total, hidden, device=DEVICE), ring=ring0.clone())
        with torch.no_grad():
            frames = sample_frames(model, state, h, rows, cfg.codec_eos_token_id, suppress, SamplingFeatures())
        out[name] = frames, state.ring, state.next_input
    assert torch.equal(out["fast"][0], forced) and torch.equal(out["plain"][0], forced)
    assert torch.equal(out["fast"][1], out["plain"][1]) and not torch.equal(out["fast"][1], ring0)
    torch.testing.assert_close(out["fast"][2], out["plain"][2], rtol=1e-5, atol=1e-5)
    others = [s for s in range(slots_total) if s not in slots.tolist()]
    assert torch.equal(out["fast"][2][others], next0[others])
    assert not torch.equal(out["fast"][2][slots], next0[slots])


def test_the_text_table_is_the_projected_text(tiny_ckpt: Callable[[str], Path]) -> None:
    """fp32: every text id's row of the table is Talker.text_embed of that id (the table built in pieces smaller
    than the vocabulary, so that every piece's edge is crossed)."""
    from voxgate.engine.qwen3tts.batch_step import projected_text

    talker = _load(tiny_ckpt, "cv17").talker
    table = projected_text(talker, chunk=7)
    ids = torch.arange(talker.cfg.text_vocab_size, device=DEVICE)
    assert table.shape == (len(ids), talker.cfg.layers.hidden_size) and table.dtype == torch.float32
    with torch.no_grad():
        torch.testing.assert_close(table, talker.text_embed(ids), rtol=1e-5, atol=1e-5)

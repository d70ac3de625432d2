"""Our aligner port against the reference (qwen-asr 0.0.6) on one tiny synthetic checkpoint, CPU fp32: the
features, the prompt, the encoder output, the logits and the final unit times, on clips that cover one short
chunk, several chunks with a short last one, an exact multiple of the chunk, several attention windows, and audio
louder than full scale."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from voxgate.engine.aligner.align import Aligner
from voxgate.engine.aligner.features import log_mel, peak_limited
from voxgate.engine.aligner.units import split_units

from .clips import clip
from .reference import reference_inputs, reference_model

# (seconds, peak): 0.7 s is one 70-frame chunk; 2.55 s ends on a 55-frame chunk; 4.0 s is exactly 4 chunks;
# 5.3 s spans three 2-chunk attention windows; peak 1.6 goes through the peak limiter.
CLIPS = [(0.7, 0.5), (2.55, 0.9), (4.0, 0.3), (5.3, 1.6)]
TEXTS = [
    "Hello, world! It's a test.",
    "Dr. Smith paid $4.50 for 3 apples -- on 2024-05-01 (really?)",
    "你好，世界！今天天气很好。",
    "混合 text 和 English words, 还有 numbers 123。",
    "naïve café déjà-vu: rock'n'roll",
]


@pytest.fixture(scope="module")
def ours(aligner_ckpt):
    return Aligner.from_pretrained(aligner_ckpt)


@pytest.fixture(scope="module")
def ref(ref_aligner):
    return ref_aligner


@pytest.fixture(scope="module")
def ref_full_attention(aligner_ckpt):
    return reference_model(aligner_ckpt, windowed=False)


def assert_close(ours: torch.Tensor, theirs: torch.Tensor, rtol: float = 1e-4, atol: float = 1e-4) -> None:
    assert ours.shape == theirs.shape
    err = (ours - theirs).abs()
    worst = int(err.argmax())
    torch.testing.assert_close(ours, theirs, rtol=rtol, atol=atol,
                               msg=lambda m: f"{m}; worst at flat index {worst}: {ours.flatten()[worst]} vs "
                                             f"{theirs.flatten()[worst]}")


@pytest.mark.parametrize("text", TEXTS)
def test_units_and_prompt_match(ours, ref, text):
    audio = clip(2.55)
    units, inputs = reference_inputs(ref, audio, text)
    assert [u.text for u in split_units(text)] == units
    ids, _ = ours.logits(audio, units)
    assert ids.tolist() == inputs["input_ids"][0].tolist()


@pytest.mark.parametrize(("seconds", "peak"), CLIPS)
def test_features_encoder_and_logits_match(ours, ref, seconds, peak):
    audio = clip(seconds, seed=int(seconds * 10), peak=peak)
    text = TEXTS[0]
    units, inputs = reference_inputs(ref, peak_limited(audio), text)  # the reference's wrapper limits the peak first
    features = inputs["input_features"][0]
    mel = log_mel(torch.from_numpy(peak_limited(audio)))
    assert int(inputs["feature_attention_mask"].sum()) == mel.shape[1]
    assert_close(mel, features[:, : mel.shape[1]], rtol=1e-4, atol=1e-5)

    with torch.inference_mode():
        theirs_audio = ref.model.thinker.audio_tower(features[:, : mel.shape[1]],
                                                     feature_lens=torch.tensor([mel.shape[1]])).last_hidden_state
        assert_close(ours.thinker.audio_tower(mel), theirs_audio)
        theirs = ref.model.thinker(**inputs).logits[0]
    ids, logits = ours.logits(audio, units)
    assert_close(logits, theirs)
    slots = ids == ours.cfg.timestamp_token_id
    assert logits[slots].argmax(-1).tolist() == theirs[slots].argmax(-1).tolist()


@pytest.mark.parametrize(("seconds", "peak"), CLIPS)
@pytest.mark.parametrize("text", TEXTS)
def test_unit_times_match(ours, ref, seconds, peak, text):
    audio = clip(seconds, seed=int(seconds * 10) + len(text), peak=peak)
    theirs = ref.align(audio=(audio, 16_000), text=text, language="English")[0]
    got = ours.unit_times(audio, text)
    assert [t.unit.text for t in got] == [item.text for item in theirs]
    assert [(t.start_ms / 1000, t.end_ms / 1000) for t in got] == [(it.start_time, it.end_time) for it in theirs]


def test_the_clips_exercise_the_repair(ours):
    """The checkpoint's predictions are out of order somewhere, so test_unit_times_match covers the repair."""
    from voxgate.engine.aligner.timestamps import trusted

    audio = clip(5.3)
    units = [u.text for u in split_units(TEXTS[1])]
    ids, logits = ours.logits(audio, units)
    classes = logits[ids == ours.cfg.timestamp_token_id].argmax(-1).tolist()
    assert len(set(classes)) > 2 and not all(trusted([float(c) for c in classes]))
    assert np.all(np.diff([t.start_ms for t in ours.unit_times(audio, TEXTS[1])]) >= 0)


def test_whole_clip_attention_matches_the_reference_eager_path(ours, ref_full_attention):
    """windowed=False is the reference's eager/SDPA encoder (no window mask); on a clip of three windows it differs
    from the windowed encoder, so the two parity checks are not the same check twice."""
    mel = log_mel(torch.from_numpy(clip(5.3)))
    with torch.inference_mode():
        theirs = ref_full_attention.thinker.audio_tower(mel, feature_lens=torch.tensor([mel.shape[1]]))
        whole = ours.thinker.audio_tower(mel, windowed=False)
        assert_close(whole, theirs.last_hidden_state)
        assert not torch.allclose(whole, ours.thinker.audio_tower(mel), atol=1e-3)

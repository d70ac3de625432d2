"""ECAPA x-vectors equal the reference's `extract_speaker_embedding`; the mel front end matches transformers'."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from voxgate.engine.qwen3tts.model.speaker_encoder import mel_filterbank


@pytest.mark.slow
def test_slaney_mel_filterbank_matches_transformers() -> None:
    from transformers.audio_utils import mel_filter_bank

    want = mel_filter_bank(num_frequency_bins=513, num_mel_filters=128, min_frequency=0.0, max_frequency=12_000.0,
                           sampling_rate=24_000, norm="slaney", mel_scale="slaney").T
    np.testing.assert_allclose(mel_filterbank(24_000, 1024, 128, 0.0, 12_000.0), want, rtol=1e-5, atol=1e-7)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["base06", "base17"])
@pytest.mark.parametrize("seconds", [0.5, 3.0])
def test_x_vector_matches_reference(ours: Any, reference: Any, kind: str, seconds: float) -> None:
    m, ref = ours(kind), reference(kind)
    rng = np.random.default_rng(int(seconds * 10))
    audio = (0.1 * rng.standard_normal(int(24_000 * seconds))).astype(np.float32)
    got = m.speaker_embedding(audio)
    with torch.no_grad():
        want = ref.extract_speaker_embedding(audio, 24_000)
    assert got.shape == (m.cfg.talker.layers.hidden_size,)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_speaker_encoder_rejects_other_rates(ours: Any) -> None:
    with pytest.raises(ValueError, match="24000 Hz"):
        ours("base06").speaker_embedding(np.zeros(16_000, dtype=np.float32), 16_000)

"""In-context voice cloning from a waveform, end to end: our `clone_voice` (codec encoder + speaker encoder) then
generate + decode equals the reference wrapper's `Qwen3TTSModel.generate_voice_clone` on the same audio and
transcript (greedy, fp32, CPU, tiny Base checkpoint): the same codes, and the same audio after the reference cut."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from voxgate.engine.qwen3tts.model.config import GenerationConfig

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:transformers.*")

TEXT = "Hello world, this is a cloned voice."
REF_TEXT = "This is the reference transcript."
SAMPLES = 14  # reference max_new_tokens: N samples give N-1 frames without EOS
GREEDY = GenerationConfig().greedy()


def reference_wrapper(model: Any, ckpt: Path, shared: Path) -> Any:
    """`Qwen3TTSModel` around the reference model, with the reference 12 Hz tokenizer (our checkpoint's tensors) as
    its speech tokenizer and the standard-regex text tokenizer as its processor (design §3: the local-directory load
    would swap in the Mistral regex; the texts here tokenize the same either way)."""
    from qwen_tts.inference.qwen3_tts_model import Qwen3TTSModel
    from qwen_tts.inference.qwen3_tts_tokenizer import Qwen3TTSTokenizer
    from transformers import AutoTokenizer, EncodecFeatureExtractor

    from .reference import reference_tokenizer

    tok = Qwen3TTSTokenizer()
    tok.model = reference_tokenizer(ckpt)
    tok.feature_extractor = EncodecFeatureExtractor.from_pretrained(str(ckpt / "speech_tokenizer"))
    tok.config, tok.device = tok.model.config, torch.device("cpu")
    model.load_speech_tokenizer(tok)
    return Qwen3TTSModel(model, AutoTokenizer.from_pretrained(str(shared / "text-tokenizer")), {})


@pytest.mark.slow
@pytest.mark.parametrize("seconds", [0.7, 2.05])  # 9 and 26 reference frames, neither on the frame grid
def test_clone_from_audio_matches_generate_voice_clone(ours: Any, reference: Any, tiny_ckpt: Callable[[str], Path],
                                                       shared: Path, seconds: float,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    m, ref_model = ours("base17"), reference("base17")
    rng = np.random.default_rng(int(seconds * 100))
    n = int(24_000 * seconds)
    audio = (0.1 * rng.standard_normal(n) + 0.2 * np.sin(np.arange(n) * 0.03)).astype(np.float32)

    voice = m.clone_voice(audio, 24_000, ref_text=REF_TEXT)
    codes = m.generate_codes(m.build(m.prompt_inputs(TEXT, voice, "english")), GREEDY, max_frames=SAMPLES - 1)
    got_audio = m.decode(codes, voice.ref_codes)

    wrapper = reference_wrapper(ref_model, tiny_ckpt("base17"), shared)
    captured: dict[str, Any] = {}
    generate = ref_model.generate

    def spy(*args: Any, **kwargs: Any) -> Any:  # the wrapper returns audio only; keep the codes it decoded
        out = generate(*args, **kwargs)
        captured["codes"] = out[0][0]
        captured["ref_code"] = kwargs["voice_clone_prompt"]["ref_code"][0]
        return out

    monkeypatch.setattr(ref_model, "generate", spy)
    wavs, sr = wrapper.generate_voice_clone(
        text=TEXT, language="english", ref_audio=(audio, 24_000), ref_text=REF_TEXT, do_sample=False,
        subtalker_dosample=False, max_new_tokens=SAMPLES, repetition_penalty=GREEDY.repetition_penalty,
        top_k=GREEDY.top_k, top_p=GREEDY.top_p, temperature=GREEDY.temperature,
        subtalker_top_k=GREEDY.subtalker_top_k, subtalker_top_p=GREEDY.subtalker_top_p,
        subtalker_temperature=GREEDY.subtalker_temperature)

    assert torch.equal(voice.ref_codes, captured["ref_code"])  # our encoder's reference codes
    assert voice.ref_codes.shape == (-(-n // 1920), 16)
    assert codes.shape == (SAMPLES - 1, 16) and torch.equal(codes, captured["codes"])
    want = wavs[0]
    assert sr == 24_000 and got_audio.shape == (codes.shape[0] * 1920,)
    # The reference cuts int(ref_len / total_len * samples), which float rounding can leave one sample short.
    assert want.shape[0] - got_audio.shape[0] in (0, 1)
    np.testing.assert_allclose(got_audio, want[-got_audio.shape[0]:], atol=1e-5, rtol=0)

"""Codes from our decode loop equal the reference `generate` on the same tiny checkpoint and token ids."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from voxgate.engine.qwen3tts.model.config import GenerationConfig
from voxgate.engine.qwen3tts.model.generate import Voice
from voxgate.engine.qwen3tts.model.prompt import PromptInputs

# The reference's HF generate logs through `logging`, but may also emit UserWarnings about unused sampling flags.
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:transformers.*")

TEXT = "Hello world, this is a test of 12 frames."
SAMPLES = 14  # reference max_new_tokens: N samples give N-1 frames without EOS


def reference_codes(ref: Any, inp: PromptInputs, gen: GenerationConfig, samples: int = SAMPLES) -> torch.Tensor:
    prompt: dict[str, Any] = {}
    if inp.x_vector is not None:
        prompt = {"voice_clone_prompt": {
            "ref_spk_embedding": [inp.x_vector], "x_vector_only_mode": [inp.ref_codes is None],
            "icl_mode": [inp.ref_codes is not None], "ref_code": [inp.ref_codes]}}
        if inp.ref_ids is not None:
            prompt["ref_ids"] = [torch.tensor([inp.ref_ids])]
    codes, _ = ref.generate(
        input_ids=[torch.tensor([inp.text_ids])],
        instruct_ids=[torch.tensor([inp.instruct_ids])] if inp.instruct_ids is not None else None,
        languages=[inp.language], speakers=[inp.speaker], non_streaming_mode=inp.non_streaming,
        max_new_tokens=samples, do_sample=gen.do_sample, top_k=gen.top_k, top_p=gen.top_p,
        temperature=gen.temperature, subtalker_dosample=gen.subtalker_dosample, subtalker_top_k=gen.subtalker_top_k,
        subtalker_top_p=gen.subtalker_top_p, subtalker_temperature=gen.subtalker_temperature,
        repetition_penalty=gen.repetition_penalty, **prompt)
    return codes[0]


def assert_same(ours_model: Any, ref: Any, inp: PromptInputs, gen: GenerationConfig, seed: int | None = None,
                samples: int = SAMPLES) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed) if seed is not None else None
    got = ours_model.generate_codes(ours_model.build(inp), gen, max_frames=samples - 1, generator=generator)
    if seed is not None:
        torch.manual_seed(seed)  # the reference draws from the global generator
    want = reference_codes(ref, inp, gen, samples)
    assert got.shape == want.shape
    assert torch.equal(got, want), f"first mismatch at frame {int((got != want).any(1).nonzero()[0])}"
    return got


GREEDY = GenerationConfig().greedy()


@pytest.mark.slow
@pytest.mark.parametrize("non_streaming", [True, False], ids=["text-up-front", "text-per-frame"])
@pytest.mark.parametrize(("speaker", "language", "instruct"), [
    ("ryan", "auto", None),
    ("ryan", "english", None),
    ("eric", "chinese", None),  # dialect override -> sichuan_dialect
    ("dylan", "auto", None),  # dialect override from auto
    ("vivian", "chinese", "Speak slowly and warmly."),
])
def test_custom_voice_greedy(ours: Any, reference: Any, speaker: str, language: str, instruct: str | None,
                             non_streaming: bool) -> None:
    m = ours("cv17")
    inp = m.prompt_inputs(TEXT, speaker, language, instruct, non_streaming=non_streaming)
    assert (inp.instruct_ids is not None) == (instruct is not None)
    assert_same(m, reference("cv17"), inp, GREEDY)


@pytest.mark.slow
def test_custom_voice_06b_drops_instruct_and_has_no_projection(ours: Any, reference: Any) -> None:
    m = ours("cv06")
    assert isinstance(m.talker.code_predictor.small_to_mtp_projection, torch.nn.Identity)
    inp = m.prompt_inputs(TEXT, "aiden", "english", "Whisper.")
    assert inp.instruct_ids is None  # the wrapper silently drops instruct on 0.6B
    assert_same(m, reference("cv06"), inp, GREEDY)


@pytest.mark.slow
@pytest.mark.parametrize("non_streaming", [True, False])
def test_voice_design_greedy(ours: Any, reference: Any, non_streaming: bool) -> None:
    m = ours("vd17")
    inp = m.prompt_inputs(TEXT, None, "english", "A deep, calm narrator voice.", non_streaming=non_streaming)
    assert_same(m, reference("vd17"), inp, GREEDY)


def _xvector(m: Any) -> torch.Tensor:
    audio = torch.randn(24_000, generator=torch.Generator().manual_seed(7)).mul(0.1).numpy()
    return m.speaker_embedding(audio)


@pytest.mark.slow
@pytest.mark.parametrize("non_streaming", [True, False])
def test_base_x_vector_only(ours: Any, reference: Any, non_streaming: bool) -> None:
    m = ours("base06")
    inp = m.prompt_inputs(TEXT, Voice(x_vector=_xvector(m)), "english", non_streaming=non_streaming)
    assert_same(m, reference("base06"), inp, GREEDY)


@pytest.mark.slow
@pytest.mark.parametrize("non_streaming", [True, False])
@pytest.mark.parametrize("ref_frames", [3, 40], ids=["text-longer", "codes-longer"])
def test_base_in_context(ours: Any, reference: Any, non_streaming: bool, ref_frames: int) -> None:
    m = ours("base17")
    codes = torch.randint(0, 2048, (ref_frames, 16), generator=torch.Generator().manual_seed(ref_frames))
    voice = Voice(x_vector=_xvector(m), ref_text="This is the reference transcript.", ref_codes=codes)
    inp = m.prompt_inputs(TEXT, voice, "english", non_streaming=non_streaming)
    assert_same(m, reference("base17"), inp, GREEDY)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sampled_codes_match_under_the_same_seed(ours: Any, reference: Any, seed: int) -> None:
    """Our RNG order equals the reference's (c0 draw, then 15 predictor draws per frame)."""
    m = ours("cv17")
    inp = m.prompt_inputs(TEXT, "ryan", "english", non_streaming=False)
    gen = GenerationConfig(top_k=50, top_p=0.9 if seed == 2 else 1.0)
    assert_same(m, reference("cv17"), inp, gen, seed=seed)


@pytest.mark.slow
def test_repetition_penalty_strong(ours: Any, reference: Any) -> None:
    m = ours("cv17")
    inp = m.prompt_inputs(TEXT, "serena", "auto")
    gen = GenerationConfig(repetition_penalty=1.5).greedy()
    assert_same(m, reference("cv17"), inp, gen)


def test_eos_ends_the_stream_like_the_reference(ours: Any, reference: Any) -> None:
    """Make EOS win after a few frames in both models: same codes, EOS frame not emitted, never before frame 2."""
    m, ref = ours("cv06"), reference("cv06")
    inp = m.prompt_inputs(TEXT, "ryan", "english")
    first = m.generate_codes(m.build(inp), GREEDY, max_frames=6)
    eos = m.cfg.talker.codec_eos_token_id
    saved = m.talker.codec_head.weight.detach().clone()
    try:
        with torch.no_grad():
            for head in (m.talker.codec_head, ref.talker.codec_head):
                head.weight[eos] = saved[int(first[0, 0])] * 4  # wins wherever frame 0's code would
        got = assert_same(m, ref, inp, GREEDY, samples=40)
        assert 2 <= got.shape[0] < 39
    finally:
        with torch.no_grad():
            m.talker.codec_head.weight.copy_(saved)
            ref.talker.codec_head.weight.copy_(saved)

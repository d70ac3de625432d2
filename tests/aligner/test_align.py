"""`Aligner.align`: our words get the times of their first aligner unit, on the 24 kHz timeline; the loader and the
config refuse what they cannot serve."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import soxr
import torch
from safetensors.torch import load_file, save_file
from voxgate.engine.aligner.align import Aligner, UnitTime, word_times
from voxgate.engine.aligner.checkpoint import expected_shapes, load_aligner
from voxgate.engine.aligner.config import parse_config
from voxgate.engine.aligner.synthetic import aligner_config
from voxgate.engine.aligner.units import split_units
from voxgate.engine.qwen3tts.model.checkpoint import CheckpointError
from voxgate.engine.qwen3tts.model.config import ConfigError
from voxgate.engine.words import WordTime, text_words

from .clips import clip


def timed(text: str, starts_ms: list[int]) -> list[UnitTime]:
    return [UnitTime(u, s, s + 40) for u, s in zip(split_units(text), starts_ms, strict=True)]


def test_a_word_starts_with_its_first_unit():
    text = "Hello, world! — 你好 ok"
    # units: Hello, world, 你, 好, ok
    got = word_times(text_words(text), timed(text, [80, 400, 800, 880, 1200]), num_samples=48_000)
    assert got == [WordTime("Hello,", 1920, 9600), WordTime("world! —", 9600, 19200), WordTime("你好", 19200, 28800),
                   WordTime("ok", 28800, 48_000)]


def test_a_word_without_units_starts_with_the_next_timed_word():
    text = "a _ b __"
    got = word_times(text_words(text), timed(text, [80, 160]), num_samples=24_000)
    assert [(w.word, w.start, w.end) for w in got] == [("a", 1920, 3840), ("_", 3840, 3840), ("b", 3840, 24_000),
                                                       ("__", 24_000, 24_000)]


def test_times_past_the_clip_are_clamped():
    got = word_times(text_words("late"), timed("late", [2000]), num_samples=24_000)
    assert got == [WordTime("late", 24_000, 24_000)]


@pytest.fixture(scope="module")
def ours(aligner_ckpt):
    return Aligner.from_pretrained(aligner_ckpt)


@pytest.mark.parametrize("text", ["", "  ", "— … !"])
def test_a_text_without_words_has_no_times(ours, text):
    assert ours.align(clip(1.0, rate=24_000), text) == []


@pytest.mark.parametrize("text", ["Dr. Smith paid $4.50 -- on 2024-05-01 (really?)", "今天 天气很好。 Yes!"])
def test_align_at_24khz_matches_the_reference_at_16khz(ours, ref_aligner, text):
    audio = clip(3.3, rate=24_000, seed=3)
    audio_16k = soxr.resample(audio, 24_000, 16_000)
    ref = ref_aligner.align(audio=(audio_16k, 16_000), text=text, language="English")[0]
    units = ours.unit_times(audio_16k, text)
    assert [(u.start_ms / 1000, u.end_ms / 1000) for u in units] == [(r.start_time, r.end_time) for r in ref]
    got = ours.align(audio, text)
    words = text_words(text)
    assert [w.word for w in got] == [w.text for w in words]
    first = [next(u for u in units if w.start <= u.unit.start < w.end) for w in words]
    # A random checkpoint puts most times past the clip's end: those are clamped to it.
    assert [w.start for w in got] == [min(len(audio), round(u.start_ms * 24)) for u in first]
    assert [w.end for w in got] == [w.start for w in got[1:]] + [len(audio)]


def test_the_official_shapes():
    shapes = expected_shapes(parse_config(aligner_config()))
    assert shapes["thinker.lm_head.weight"] == (5000, 1024)
    assert shapes["thinker.model.embed_tokens.weight"] == (152064, 1024)
    assert shapes["thinker.audio_tower.conv_out.weight"] == (1024, 480 * 16)
    assert shapes["thinker.model.layers.27.self_attn.k_proj.weight"] == (8 * 128, 1024)
    assert shapes["thinker.audio_tower.layers.23.fc1.weight"] == (4096, 1024)


def test_an_asr_checkpoint_is_refused():
    raw = aligner_config(tiny=True)
    raw["thinker_config"]["model_type"] = "qwen3_asr_thinker"
    with pytest.raises(ConfigError, match="forced aligner"):
        parse_config(raw)
    raw = aligner_config(tiny=True)
    del raw["thinker_config"]["classify_num"]
    with pytest.raises(ConfigError, match="classify_num"):
        parse_config(raw)


def test_a_missing_tensor_or_token_is_refused(aligner_ckpt, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(aligner_ckpt, broken)
    state = load_file(str(broken / "model.safetensors"))
    del state["thinker.audio_tower.proj2.bias"]
    save_file(state, str(broken / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"missing keys: thinker\.audio_tower\.proj2\.bias"):
        load_aligner(broken)

    shutil.copy(aligner_ckpt / "model.safetensors", broken / "model.safetensors")
    tok = json.loads((broken / "tokenizer_config.json").read_text())
    tok["added_tokens_decoder"]["151705"]["content"] = "<|not_a_timestamp|>"
    (broken / "tokenizer_config.json").write_text(json.dumps(tok))
    with pytest.raises(ValueError, match="no <timestamp> token"):
        Aligner.from_pretrained(broken)

    pre = json.loads((broken / "preprocessor_config.json").read_text())
    (broken / "preprocessor_config.json").write_text(json.dumps({**pre, "hop_length": 320}))
    with pytest.raises(ConfigError, match="hop_length"):
        load_aligner(broken)
    assert np.isfinite(load_aligner(aligner_ckpt)[2].lm_head.weight.detach().numpy()).all()


def test_bf16_runs_close_to_fp32(ours, aligner_ckpt):
    """The checkpoint's own dtype: every cast on the way (features in fp32, encoder, scatter, RoPE) holds, and the
    logits stay within bf16's rounding of the fp32 ones (0.7% relative on this checkpoint; 3% allowed)."""
    half = Aligner.from_pretrained(aligner_ckpt, dtype=torch.bfloat16)
    units = [u.text for u in split_units("Hello, world! It's a test.")]
    ids, full = ours.logits(clip(2.55), units)
    ids16, low = half.logits(clip(2.55), units)
    assert torch.equal(ids, ids16) and low.dtype == torch.bfloat16
    assert ((low.float() - full).norm() / full.norm()).item() < 0.03


def test_prompt_units_are_tokenized_once_and_the_same_as_alone(ours):
    prompt = ours.prompt
    prompt.unit_ids.cache_clear()
    units = [u.text for u in split_units("the cat and the dog, don't 今天 the 42 cat")]
    first = prompt.ids(units, 7)
    again = prompt.ids(units, 7)
    plain = [prompt.audio_start, *[prompt.audio_pad] * 7, prompt.audio_end]
    for unit in units:
        plain += [*prompt.tokenizer.encode(unit), prompt.timestamp, prompt.timestamp]
    assert first == again == plain
    info = prompt.unit_ids.cache_info()
    assert info.misses == len(set(units)) and info.hits == 2 * len(units) - len(set(units))

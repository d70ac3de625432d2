"""The codec encoder: codes identical to the reference's (`Qwen3TTSTokenizerV2Model.encode`, fp32, CPU) at tiny and
real shapes, the official `encoder.*` layout, loading with and without encoder weights, and encode -> decode."""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from voxgate.engine.qwen3tts.codec.codec_encoder import resample
from voxgate.engine.qwen3tts.model.checkpoint import CheckpointError, load_checkpoint, load_codec_encoder
from voxgate.engine.qwen3tts.model.prompt import PromptError
from voxgate.engine.qwen3tts.tools.synthetic import encoder_shapes, tiny_configs, write_synthetic

from .conftest import LIKE, require_reference

FRAME = 1920
# Lengths in samples: one sample, a frame minus/plus one, a few seconds off the frame grid, and 12 s: 300 steps of
# the encoder transformer, past the config's 250-step window (which the reference does not apply).
TINY_LENGTHS = [1, FRAME - 1, FRAME, FRAME + 1, 3 * 24_000 + 17, 12 * 24_000 + 5]
REAL_LENGTHS = [1, FRAME + 1, 2 * 24_000 + 1234]


def _audio(n: int, seed: int) -> np.ndarray:
    """Fresh random audio: noise plus a chirp, peak well inside [-1, 1]."""
    rng = np.random.default_rng(seed)
    t = np.arange(n) / 24_000
    return (0.05 * rng.standard_normal(n) + 0.3 * np.sin(2 * np.pi * (100 + 400 * t) * t)).astype(np.float32)


def _assert_same_codes(got: torch.Tensor, want: torch.Tensor, n: int) -> None:
    assert got.shape == want.shape == (math.ceil(n / FRAME), 16)
    assert got.dtype == want.dtype == torch.int64
    mismatch = (got != want).nonzero()
    assert mismatch.numel() == 0, f"{len(mismatch)} codes differ, first at [frame, codebook] {mismatch[0].tolist()}"
    if got.shape[0] >= 10:  # random weights still spread the codes (a constant code would make this test weak)
        assert min(len(set(got[:, q].tolist())) for q in range(16)) >= got.shape[0] // 3


@pytest.fixture(scope="module")
def base17(tiny_ckpt: Callable[[str], Path]) -> Path:
    return tiny_ckpt("base17")


@pytest.mark.slow
@pytest.mark.parametrize("n", TINY_LENGTHS)
def test_codes_match_reference_tiny(base17: Path, n: int) -> None:
    require_reference()
    from .reference import reference_encode, reference_tokenizer

    ours = load_codec_encoder(base17)
    audio = _audio(n, n)
    _assert_same_codes(ours.encode(audio), reference_encode(reference_tokenizer(base17), audio, base17), n)


@pytest.fixture(scope="module")
def real_encoder_ckpt(tmp_path_factory: pytest.TempPathFactory, shared: Path) -> Iterator[Path]:
    """The real-shape codec encoder alone (56.2M fp32 params): configs + `speech_tokenizer/` `encoder.*` only."""
    out = tmp_path_factory.mktemp("real-encoder")
    write_synthetic(LIKE["base17"], out, seed=7, shared=shared.parent, with_model=False, with_decoder=False)
    yield out
    shutil.rmtree(out)


@pytest.mark.slow
def test_codes_match_reference_real_shapes(real_encoder_ckpt: Path) -> None:
    """A few seconds on one core: writing the random weights, two model builds and three encodes."""
    require_reference()
    from .reference import reference_encode, reference_tokenizer

    ours = load_codec_encoder(real_encoder_ckpt)
    assert sum(p.numel() for p in ours.state_dict().values()) == 56_234_304
    ref = reference_tokenizer(real_encoder_ckpt)
    for n in REAL_LENGTHS:
        audio = _audio(n, n + 1)
        _assert_same_codes(ours.encode(audio), reference_encode(ref, audio, real_encoder_ckpt), n)


@pytest.mark.parametrize("tiny", [False, True], ids=["real", "tiny"])
def test_layout_is_the_official_mimi_encoder(shared: Path, tiny: bool) -> None:
    """Our `encoder.*` keys and shapes equal those of transformers' MimiModel (its encoder half) for the same config:
    the layout of the official speech_tokenizer file."""
    from transformers import MimiConfig, MimiModel

    d = shared / "checkpoints" / LIKE["cv17"]
    codec = json.loads((d / "speech_tokenizer/config.json").read_text())
    if tiny:
        _, codec = tiny_configs(json.loads((d / "config.json").read_text()), codec)
    with torch.device("meta"):
        mimi = MimiConfig(**{k: v for k, v in codec["encoder_config"].items() if k != "transformers_version"})
        mimi = MimiModel(mimi)
    skip = ("upsample.", "decoder_transformer.", "decoder.")
    want = {f"encoder.{k}": tuple(v.shape) for k, v in mimi.state_dict().items() if not k.startswith(skip)}
    assert encoder_shapes(codec) == want


@pytest.mark.slow
def test_encode_decode_round_trip(ours: Any) -> None:
    m = ours("base17")
    n = 2 * 24_000 + 333
    codes = m.encode(_audio(n, 1))
    assert codes.shape == (math.ceil(n / FRAME), 16) and int(codes.min()) >= 0 and int(codes.max()) < 2048
    audio = m.decode(codes)
    assert audio.shape == (codes.shape[0] * FRAME,) and audio.dtype == np.float32
    assert np.isfinite(audio).all() and 0 < np.abs(audio).max() <= 1.0


def test_other_rates_are_resampled_to_24k(ours: Any) -> None:
    m = ours("base17")
    audio_16k = _audio(16_000 + 7, 2)
    at_24k = resample(audio_16k, 16_000)
    assert at_24k.shape == (math.ceil((16_000 + 7) * 1.5),) and at_24k.dtype == np.float32
    assert torch.equal(m.encode(audio_16k, 16_000), m.encode(at_24k))


@pytest.mark.slow
def test_clone_voice_builds_an_icl_voice(ours: Any) -> None:
    m = ours("base17")
    audio = _audio(24_000, 3)
    voice = m.clone_voice(audio, 24_000, ref_text="Hello there.")
    assert torch.equal(voice.ref_codes, m.encode(audio)) and voice.ref_text == "Hello there."
    assert voice.x_vector is not None and torch.equal(voice.x_vector, m.speaker_embedding(audio))
    assert m.clone_voice(audio, 24_000).ref_codes is None  # no transcript: x-vector only


@pytest.mark.slow
def test_checkpoint_without_encoder_loads_and_refuses_encode(shared: Path, tmp_path: Path) -> None:
    from voxgate.engine.qwen3tts.model.generate import Qwen3TTS

    d = write_synthetic(LIKE["cv06"], tmp_path / "ck", seed=1, tiny=True, shared=shared.parent, with_encoder=False)
    assert not any(k.startswith("encoder.") for k in load_file(d / "speech_tokenizer/model.safetensors"))
    m = Qwen3TTS.from_pretrained(d, dtype=torch.float32, progress=False)
    assert m.codec_encoder is None
    with pytest.raises(PromptError, match="no codec encoder"):
        m.encode(np.zeros(24_000, dtype=np.float32))
    with pytest.raises(CheckpointError, match="missing keys: encoder"):
        load_checkpoint(d, progress=False, with_encoder=True)


def test_partial_encoder_weights_are_refused(base17: Path, tmp_path: Path) -> None:
    d = Path(shutil.copytree(base17, tmp_path / "ck"))
    state = load_file(str(d / "speech_tokenizer/model.safetensors"))
    del state["encoder.downsample.conv.weight"]
    save_file(state, str(d / "speech_tokenizer/model.safetensors"))
    with pytest.raises(CheckpointError, match=r"missing keys: encoder\.downsample\.conv\.weight"):
        load_checkpoint(d, progress=False)


def test_synthetic_encoder_values(base17: Path) -> None:
    state = {k: v for k, v in load_file(str(base17 / "speech_tokenizer/model.safetensors")).items()
             if k.startswith("encoder.")}
    codec = json.loads((base17 / "speech_tokenizer/config.json").read_text())
    assert {k: tuple(v.shape) for k, v in state.items()} == encoder_shapes(codec)  # 225 tensors at real shapes
    assert {v.dtype for v in state.values()} == {torch.float32}
    for k, v in state.items():
        leaf = k.rsplit(".", 1)[-1]
        if leaf == "initialized":
            assert torch.equal(v, torch.ones(1)), k  # a trained codebook's flag
        elif leaf == "cluster_usage":
            assert v.min() > 0, k
        else:
            assert v.unique().numel() >= min(v.numel(), 8), k


def test_encode_rejects_bad_input(base17: Path) -> None:
    enc = load_codec_encoder(base17)
    with pytest.raises(ValueError, match="mono waveform"):
        enc.encode(np.zeros((2, 100), dtype=np.float32))
    with pytest.raises(ValueError, match="mono waveform"):
        enc.encode(np.zeros(0, dtype=np.float32))

"""Config parsing, tensor inventories at the real shapes, strict checkpoint loading and sharding."""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file
from voxgate.engine.qwen3tts.model.checkpoint import CheckpointError, expected_shapes, load_checkpoint, resolve
from voxgate.engine.qwen3tts.model.config import ConfigError, load_config, parse_config
from voxgate.engine.qwen3tts.tools.synthetic import encoder_shapes, save_sharded

from .conftest import LIKE

# name -> (model.safetensors tensors, params), design §1 / §7.
INVENTORY = {
    "Qwen3-TTS-12Hz-1.7B-CustomVoice": (404, 1_916_676_352),
    "Qwen3-TTS-12Hz-1.7B-VoiceDesign": (404, 1_916_676_352),
    "Qwen3-TTS-12Hz-0.6B-CustomVoice": (402, 905_788_672),
    "Qwen3-TTS-12Hz-1.7B-Base": (404 + 76, 1_916_676_352 + 12_001_088),
    "Qwen3-TTS-12Hz-0.6B-Base": (402 + 76, 905_788_672 + 8_854_336),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(INVENTORY))
def test_real_shapes_reproduce_the_official_inventory(shared: Path, name: str) -> None:
    cfg = load_config(shared / "checkpoints" / name)
    model, codec = expected_shapes(cfg)
    assert (len(model), sum(math.prod(s) for s in model.values())) == INVENTORY[name]
    assert (len(codec), sum(math.prod(s) for s in codec.values())) == (271, 114_323_137)
    assert model["talker.model.text_embedding.weight"] == (151_936, 2048)
    assert model["talker.codec_head.weight"] == (3072, cfg.talker.layers.hidden_size)
    assert ("talker.code_predictor.small_to_mtp_projection.weight" in model) == ("1.7B" in name)


def test_codec_encoder_inventory(shared: Path) -> None:
    raw = json.loads((shared / "checkpoints" / LIKE["cv17"] / "speech_tokenizer/config.json").read_text())
    enc = encoder_shapes(raw)
    assert (len(enc), sum(math.prod(s) for s in enc.values())) == (225, 56_234_304)  # 271 + 225 = 496 tensors


def test_config_values(shared: Path) -> None:
    cfg = load_config(shared / "checkpoints" / LIKE["cv17"])
    assert cfg.tts_model_type == "custom_voice" and cfg.supports_instruct
    assert cfg.talker.spk_id["ryan"] == 3061 and cfg.talker.spk_is_dialect["eric"] == "sichuan_dialect"
    assert cfg.talker.codec_eos_token_id == 2150 and cfg.codec.samples_per_frame == 1920
    assert cfg.generation.max_new_tokens == 8192 and cfg.generation.repetition_penalty == 1.05
    assert "beijing_dialect" not in cfg.languages and cfg.languages[0] == "auto"
    assert not load_config(shared / "checkpoints" / LIKE["cv06"]).supports_instruct


@pytest.mark.parametrize("name", sorted(INVENTORY))
def test_the_official_repo_id_comes_from_the_config(shared: Path, name: str) -> None:
    assert load_config(shared / "checkpoints" / name).repo_id == f"Qwen/{name}"


def test_unknown_model_types_are_refused(shared: Path) -> None:
    d = shared / "checkpoints" / LIKE["cv17"]
    config = json.loads((d / "config.json").read_text())
    codec = json.loads((d / "speech_tokenizer/config.json").read_text())
    with pytest.raises(ConfigError, match="model_type 'qwen2'"):
        parse_config({**config, "model_type": "qwen2"}, codec, {})
    with pytest.raises(ConfigError, match="tts_model_type 'music'"):
        parse_config({**config, "tts_model_type": "music"}, codec, {})
    with pytest.raises(ConfigError, match="qwen3_tts_tokenizer_25hz"):
        parse_config({**config, "tokenizer_type": "qwen3_tts_tokenizer_25hz"}, codec, {})


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


@pytest.mark.slow
def test_missing_key_is_named(tiny_ckpt: Callable[[str], Path], tmp_path: Path) -> None:
    d = _copy(tiny_ckpt("cv06"), tmp_path / "ck")
    state = load_file(str(d / "model.safetensors"))
    del state["talker.model.layers.1.mlp.up_proj.weight"]
    save_file(state, str(d / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"missing keys: talker\.model\.layers\.1\.mlp\.up_proj\.weight"):
        load_checkpoint(d, progress=False)


def test_unexpected_key_is_named(tiny_ckpt: Callable[[str], Path], tmp_path: Path) -> None:
    d = _copy(tiny_ckpt("cv06"), tmp_path / "ck")
    state = load_file(str(d / "speech_tokenizer/model.safetensors"))
    state["decoder.extra.weight"] = torch.zeros(2)
    save_file(state, str(d / "speech_tokenizer/model.safetensors"))
    with pytest.raises(CheckpointError, match=r"unexpected keys: decoder\.extra\.weight"):
        load_checkpoint(d, progress=False)


def test_shape_mismatch_is_named(tiny_ckpt: Callable[[str], Path], tmp_path: Path) -> None:
    d = _copy(tiny_ckpt("cv06"), tmp_path / "ck")
    state = load_file(str(d / "model.safetensors"))
    state["talker.codec_head.weight"] = state["talker.codec_head.weight"][:10]
    save_file(state, str(d / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"talker\.codec_head\.weight"):
        load_checkpoint(d, progress=False)


@pytest.mark.slow
def test_sharded_checkpoint_loads_identically(tiny_ckpt: Callable[[str], Path], tmp_path: Path) -> None:
    src = tiny_ckpt("cv17")
    d = _copy(src, tmp_path / "ck")
    state = load_file(str(d / "model.safetensors"))
    (d / "model.safetensors").unlink()
    save_sharded(state, d, shard_bytes=4 << 20)
    assert len(list(d.glob("model-*-of-*.safetensors"))) > 1
    _, _, a, _ = load_checkpoint(src, dtype=torch.float32, progress=False)
    _, _, b, _ = load_checkpoint(d, dtype=torch.float32, progress=False)
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_dtypes_per_part(tiny_ckpt: Callable[[str], Path]) -> None:
    d = tiny_ckpt("cv17")
    # Synthetic files use the official dtypes: bf16 model, fp32 codec.
    assert {v.dtype for v in load_file(str(d / "model.safetensors")).values()} == {torch.bfloat16}
    assert {v.dtype for v in load_file(str(d / "speech_tokenizer/model.safetensors")).values()} == {torch.float32}
    _, _, weights, codec = load_checkpoint(d, progress=False)
    assert {p.dtype for p in weights.parameters()} == {torch.bfloat16}
    assert {p.dtype for p in codec.parameters()} == {torch.float32}


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["base17", "cv06"])
def test_synthetic_1d_tensors_are_random(tiny_ckpt: Callable[[str], Path], kind: str) -> None:
    """Every bias, norm weight, SnakeBeta parameter, LayerScale, ConvNeXt gamma and codebook usage of a synthetic
    checkpoint is drawn at random (a constant one lets a wrong slice or fold of it pass every parity test), at
    scales that keep activations finite: norm gains within 1 +- 0.1, SnakeBeta log-parameters within +- 0.2,
    codebook usage positive, small biases."""
    state = {**load_file(tiny_ckpt(kind) / "model.safetensors"),
             **load_file(tiny_ckpt(kind) / "speech_tokenizer/model.safetensors")}
    vectors = {k: v.float() for k, v in state.items() if v.dim() == 1 and not k.endswith(".initialized")}
    assert len(vectors) > 100 and any(k.startswith("speaker_encoder.") for k in vectors) == (kind == "base17")
    for name, v in vectors.items():
        leaf = name.rsplit(".", 1)[-1]
        if v.numel() > 1:  # not constant (the Talker's are bf16: a few equal values are expected)
            assert v.unique().numel() >= min(v.numel(), 8), name
        else:
            assert float(v) not in (0.0, 1.0), name
        if leaf in ("alpha", "beta"):
            assert v.abs().max() <= 0.2, name
        elif leaf == "cluster_usage":
            assert v.min() > 0, name
        elif leaf == "weight" and "norm" in name:
            assert (v - 1).abs().max() <= 0.1 + 2**-7, name  # + one bf16 step at 1
        elif leaf == "bias":
            assert v.abs().max() < 0.2, name


def test_resolve_rejects_non_directories(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="not a checkpoint directory"):
        resolve(tmp_path / "nope")


def test_load_shows_progress(tiny_ckpt: Callable[[str], Path], capsys: Any) -> None:
    load_checkpoint(tiny_ckpt("cv06"), progress=True)
    assert "loading model" in capsys.readouterr().err


@pytest.mark.slow
def test_real_shape_06b_checkpoint_round_trip(shared: Path, tmp_path: Path) -> None:
    """Write the 0.6B CustomVoice at its real shapes (1.8 GB + 0.7 GB) and load it back through the real loader."""
    from safetensors import safe_open
    from voxgate.engine.qwen3tts.model.generate import Qwen3TTS
    from voxgate.engine.qwen3tts.tools.synthetic import write_synthetic

    out = tmp_path / "ck06"
    write_synthetic("Qwen3-TTS-12Hz-0.6B-CustomVoice", out, seed=1, shared=shared.parent)
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        assert len(list(f.keys())) == 402
    tts = Qwen3TTS.from_pretrained(out, device="cpu", dtype="fp32")
    assert len(tts.talker.state_dict()) == 402
    assert sum(p.numel() for p in tts.talker.parameters()) == 905_788_672
    assert sum(p.numel() for p in tts.codec.parameters()) == 114_323_137
    shutil.rmtree(out)  # 2.5 GB: do not keep it until the session's temp cleanup

"""The codec encoder's config is checked only where the encoder is built (Base checkpoints, for voice uploads): a
CustomVoice checkpoint whose unused `encoder_config` is inconsistent loads and speaks, as the reference serves it;
a Base checkpoint with the same flaw is refused in one line naming the file and the key."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from voxgate.engine.base import SynthesisRequest
from voxgate.engine.qwen3tts.engine import create_engine
from voxgate.engine.qwen3tts.model.config import ConfigError

SMALL = dict(device="cpu", dtype="fp32", greedy="true", warmup="false", row_buckets="1,2", prefill_buckets="64",
             max_slots="3", max_positions="200", max_rows="2", chunk_frames="2")


def _flawed_copy(src: Path, dst: Path) -> Path:
    """A copy whose speech_tokenizer encoder_config has vector_quantization_hidden_dimension = 2 x codebook_dim."""
    shutil.copytree(src, dst)
    path = dst / "speech_tokenizer" / "config.json"
    config = json.loads(path.read_text())
    encoder = config["encoder_config"]
    encoder["vector_quantization_hidden_dimension"] = 2 * encoder["codebook_dim"]
    path.write_text(json.dumps(config))
    return dst


@pytest.mark.slow
async def test_custom_voice_with_a_flawed_unused_encoder_config_serves(tiny_ckpt: Callable[[str], Path],
                                                                        tmp_path: Path) -> None:
    engine = create_engine(model=str(_flawed_copy(tiny_ckpt("cv06"), tmp_path / "cv")), **SMALL)
    await engine.start()
    try:
        assert engine.tts.codec_encoder is None and engine.info()["repo_id"] == "Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice"
        stream = engine.open_stream(SynthesisRequest("Hello there.", voice="ryan", max_audio_ms=320))
        audio = np.concatenate([chunk async for chunk in stream])
        assert len(audio) == 4 * 1920
    finally:
        await engine.stop()


@pytest.mark.slow
async def test_base_with_the_same_flaw_is_refused_naming_file_and_key(tiny_ckpt: Callable[[str], Path],
                                                                     tmp_path: Path) -> None:
    directory = _flawed_copy(tiny_ckpt("base06"), tmp_path / "base")
    dim = json.loads((directory / "speech_tokenizer" / "config.json").read_text())["encoder_config"]["codebook_dim"]
    engine = create_engine(model=str(directory), **SMALL)
    with pytest.raises(ConfigError) as refused:
        await engine.start()
    message = str(refused.value)
    assert message.startswith(f"{directory}/speech_tokenizer/config.json: "
                              f"encoder_config.vector_quantization_hidden_dimension ({2 * dim}) must equal "
                              f"encoder_config.codebook_dim ({dim})"), message
    assert "\n" not in message

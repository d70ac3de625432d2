"""Typed view of a Qwen3-ForcedAligner checkpoint's config.json (the official `qwen3_asr` layout).

As for the TTS (engine/qwen3tts/model/config.py), every field the port uses is read from the file: a missing field
is an error, never a silent class default.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..qwen3tts.model.config import ConfigError, DecoderLayersConfig, _get

MODEL_TYPE = "qwen3_asr"
ALIGNER_TYPE = "qwen3_forced_aligner"  # thinker_config.model_type: the timestamp head instead of the vocabulary head
# The encoder's chunk of mel frames: the reference's output-length rule hard-codes 100 frames -> 13 encoder frames.
CHUNK_FRAMES = 100


@dataclass(frozen=True, slots=True)
class AudioEncoderConfig:
    num_mel_bins: int
    encoder_layers: int
    encoder_attention_heads: int
    encoder_ffn_dim: int
    d_model: int
    output_dim: int
    n_window: int  # half a chunk, in mel frames
    n_window_infer: int  # attention window, in mel frames (a multiple of the chunk)
    downsample_hidden_size: int

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str) -> AudioEncoderConfig:
        if d.get("activation_function", "gelu") != "gelu":
            raise ConfigError(f"{where}: only the gelu activation is supported")
        cfg = cls(**{f: _get(d, f, where) for f in cls.__slots__})  # type: ignore[attr-defined]
        if cfg.n_window * 2 != CHUNK_FRAMES or cfg.n_window_infer % CHUNK_FRAMES:
            raise ConfigError(f"{where}: n_window must be {CHUNK_FRAMES // 2} and n_window_infer a multiple of "
                              f"{CHUNK_FRAMES} (got {cfg.n_window}, {cfg.n_window_infer})")
        if cfg.d_model % cfg.encoder_attention_heads:
            raise ConfigError(f"{where}: d_model {cfg.d_model} is not a multiple of the heads")
        return cfg

    @property
    def chunks_per_window(self) -> int:
        return self.n_window_infer // CHUNK_FRAMES


@dataclass(frozen=True, slots=True)
class AlignerConfig:
    audio: AudioEncoderConfig
    text: DecoderLayersConfig
    classify_num: int  # timestamp classes: class k is k * timestamp_segment_time ms
    audio_token_id: int  # <|audio_pad|>, one per encoder frame
    timestamp_token_id: int  # <timestamp>, two after each word (its start and its end)
    timestamp_segment_time: float  # ms per class


def parse_config(raw: dict[str, Any]) -> AlignerConfig:
    if raw.get("model_type") != MODEL_TYPE:
        raise ConfigError(f"config.json: model_type {raw.get('model_type')!r}, expected {MODEL_TYPE!r}")
    thinker = _get(raw, "thinker_config", "config.json")
    w = "config.json thinker_config"
    if thinker.get("model_type") != ALIGNER_TYPE:
        raise ConfigError(f"{w}: model_type {thinker.get('model_type')!r}, expected {ALIGNER_TYPE!r} "
                          "(an ASR checkpoint, not the forced aligner?)")
    text = _get(thinker, "text_config", w)
    rope = text.get("rope_scaling") or {}
    if rope.get("rope_type", rope.get("type", "default")) != "default":
        raise ConfigError(f"{w}.text_config: only the default RoPE is supported, got {rope}")
    audio = AudioEncoderConfig.from_dict(_get(thinker, "audio_config", w), f"{w}.audio_config")
    if audio.output_dim != text["hidden_size"]:
        raise ConfigError(f"{w}: audio output_dim {audio.output_dim} != text hidden_size {text['hidden_size']}")
    return AlignerConfig(
        audio=audio,
        text=DecoderLayersConfig.from_dict(text, f"{w}.text_config"),
        classify_num=_get(thinker, "classify_num", w),
        audio_token_id=_get(thinker, "audio_token_id", w),
        timestamp_token_id=_get(raw, "timestamp_token_id", "config.json"),
        timestamp_segment_time=float(_get(raw, "timestamp_segment_time", "config.json")),
    )


def load_config(model_dir: str | Path) -> AlignerConfig:
    path = Path(model_dir) / "config.json"
    if not path.is_file():
        raise ConfigError(f"{model_dir}: missing config.json")
    return parse_config(json.loads(path.read_text()))

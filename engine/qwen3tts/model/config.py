"""Typed views of a checkpoint's config.json, generation_config.json and speech_tokenizer/config.json.

Only the fields the port uses are kept. Class defaults in the reference are misleading (design §1), so every field
here is read from the file; a missing field is an error, not a silent default.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MODEL_TYPE = "qwen3_tts"
TOKENIZER_TYPE = "qwen3_tts_tokenizer_12hz"
TTS_MODEL_TYPES = ("base", "custom_voice", "voice_design")
CODEC_CONFIG = "speech_tokenizer/config.json"
REPO_KINDS = {"base": "Base", "custom_voice": "CustomVoice", "voice_design": "VoiceDesign"}  # official repo names


class ConfigError(ValueError):
    """A checkpoint config this port cannot serve."""


def _get(d: dict[str, Any], key: str, where: str) -> Any:
    if key not in d:
        raise ConfigError(f"{where}: missing field {key!r}")
    return d[key]


@dataclass(frozen=True, slots=True)
class DecoderLayersConfig:
    """A Qwen3-style decoder stack (the Talker backbone or the code predictor)."""

    num_hidden_layers: int
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    rms_norm_eps: float
    rope_theta: float

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str) -> DecoderLayersConfig:
        if d.get("hidden_act", "silu") != "silu" or d.get("attention_bias", False):
            raise ConfigError(f"{where}: only silu MLPs without attention bias are supported")
        if d.get("use_sliding_window", False):
            raise ConfigError(f"{where}: sliding-window attention is not supported for the Talker")
        return cls(**{f: _get(d, f, where) for f in cls.__slots__})  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True)
class TalkerConfig:
    layers: DecoderLayersConfig
    code_predictor: DecoderLayersConfig
    text_vocab_size: int
    text_hidden_size: int
    num_code_groups: int
    codec_pad_id: int
    codec_bos_id: int
    codec_eos_token_id: int
    codec_think_id: int
    codec_nothink_id: int
    codec_think_bos_id: int
    codec_think_eos_id: int
    codec_language_id: dict[str, int]
    spk_id: dict[str, int]
    spk_is_dialect: dict[str, str | bool]

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TalkerConfig:
        w = "talker_config"
        scaling = d.get("rope_scaling") or {}
        # The 3-section MRoPE with identical position streams is plain 1-D RoPE (design §2); anything else is not.
        if scaling.get("rope_type", scaling.get("type", "default")) != "default":
            raise ConfigError(f"{w}: unsupported rope_scaling {scaling!r}")
        ints = ("text_vocab_size", "text_hidden_size", "num_code_groups", "codec_pad_id", "codec_bos_id",
                "codec_eos_token_id", "codec_think_id", "codec_nothink_id", "codec_think_bos_id", "codec_think_eos_id")
        return cls(
            layers=DecoderLayersConfig.from_dict(d, w),
            code_predictor=DecoderLayersConfig.from_dict(_get(d, "code_predictor_config", w), f"{w}.code_predictor"),
            codec_language_id=dict(_get(d, "codec_language_id", w)),
            spk_id=dict(d.get("spk_id") or {}),
            spk_is_dialect=dict(d.get("spk_is_dialect") or {}),
            **{k: int(_get(d, k, w)) for k in ints},
        )


@dataclass(frozen=True, slots=True)
class SpeakerEncoderConfig:
    """ECAPA-TDNN (Base only). Sizes other than enc_dim come from the reference's defaults unless the file says."""

    enc_dim: int
    sample_rate: int = 24_000
    mel_dim: int = 128
    enc_channels: tuple[int, ...] = (512, 512, 512, 512, 1536)
    enc_kernel_sizes: tuple[int, ...] = (5, 3, 3, 3, 1)
    enc_dilations: tuple[int, ...] = (1, 2, 3, 4, 1)
    enc_attention_channels: int = 128
    enc_res2net_scale: int = 8
    enc_se_channels: int = 128

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SpeakerEncoderConfig:
        known = {k: (tuple(v) if isinstance(v, list) else v) for k, v in d.items() if k in cls.__slots__}  # type: ignore[attr-defined]
        return cls(**known)


@dataclass(frozen=True, slots=True)
class CodecDecoderConfig:
    """The 12 Hz speech-tokenizer decoder (design §9)."""

    codebook_size: int
    codebook_dim: int
    num_quantizers: int
    latent_dim: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    sliding_window: int
    rope_theta: float
    rms_norm_eps: float
    layer_scale_initial_scale: float
    decoder_dim: int
    upsampling_ratios: tuple[int, ...]
    upsample_rates: tuple[int, ...]

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CodecDecoderConfig:
        w = "speech_tokenizer decoder_config"
        vals = {f: _get(d, f, w) for f in cls.__slots__}  # type: ignore[attr-defined]
        vals["upsampling_ratios"] = tuple(vals["upsampling_ratios"])
        vals["upsample_rates"] = tuple(vals["upsample_rates"])
        return cls(**vals)

    @property
    def samples_per_frame(self) -> int:
        n = 1
        for r in (*self.upsampling_ratios, *self.upsample_rates):
            n *= r
        return n


@dataclass(frozen=True, slots=True)
class CodecEncoderConfig:
    """The 12 Hz codec encoder (design §8): a Mimi encoder (SEANet, transformer, downsample, split RVQ) of which
    only the first `valid_num_quantizers` codebooks are used."""

    sampling_rate: int
    num_filters: int
    kernel_size: int
    last_kernel_size: int
    residual_kernel_size: int
    dilation_growth_rate: int
    num_residual_layers: int
    compress: int
    upsampling_ratios: tuple[int, ...]
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    norm_eps: float
    rope_theta: float
    layer_scale_initial_scale: float
    codebook_size: int
    codebook_dim: int
    num_quantizers: int
    num_semantic_quantizers: int
    vector_quantization_hidden_dimension: int
    frame_rate: float
    valid_num_quantizers: int

    @classmethod
    def from_dict(cls, d: dict[str, Any], valid_num_quantizers: int) -> CodecEncoderConfig:
        w = f"{CODEC_CONFIG}: encoder_config"
        # What the port implements; anything else in a config is refused rather than run wrongly.
        fixed = {"audio_channels": 1, "use_causal_conv": True, "use_conv_shortcut": False, "pad_mode": "constant",
                 "hidden_act": "gelu", "attention_bias": False}
        for key, want in fixed.items():
            if d.get(key, want) != want:
                raise ConfigError(f"{w}.{key}={d[key]!r} is not supported (only {want!r})")
        if d.get("rope_scaling"):
            raise ConfigError(f"{w}.rope_scaling is not supported")
        vals = {f: _get(d, f, w) for f in cls.__slots__ if f not in ("frame_rate", "valid_num_quantizers")}  # type: ignore[attr-defined]
        vals["upsampling_ratios"] = tuple(vals["upsampling_ratios"])
        cfg = cls(frame_rate=float(_get(d, "_frame_rate", w)), valid_num_quantizers=valid_num_quantizers, **vals)
        if cfg.vector_quantization_hidden_dimension != cfg.codebook_dim:
            raise ConfigError(f"{w}.vector_quantization_hidden_dimension ({cfg.vector_quantization_hidden_dimension}) "
                              f"must equal encoder_config.codebook_dim ({cfg.codebook_dim}) to build the codec encoder")
        if not cfg.num_semantic_quantizers < valid_num_quantizers <= cfg.num_quantizers:
            raise ConfigError(f"{CODEC_CONFIG}: encoder_valid_num_quantizers {valid_num_quantizers} out of range")
        if cfg.downsample_stride * cfg.hop_length != round(cfg.sampling_rate / cfg.frame_rate):
            raise ConfigError(f"{w}._frame_rate {cfg.frame_rate} is not the SEANet rate / 2")
        return cfg

    @property
    def hop_length(self) -> int:
        """Samples per SEANet output step (960 at 24 kHz: 25 Hz)."""
        n = 1
        for r in self.upsampling_ratios:
            n *= r
        return n

    @property
    def downsample_stride(self) -> int:
        return 2  # Mimi's downsample conv always halves the SEANet rate

    @property
    def downsample_kernel(self) -> int:
        seanet_rate = -(-self.sampling_rate // self.hop_length)  # ceil, as Mimi computes it
        return 2 * int(seanet_rate / self.frame_rate)

    @property
    def samples_per_frame(self) -> int:
        return self.hop_length * self.downsample_stride


@dataclass(frozen=True, slots=True)
class GenerationConfig:
    """Sampling settings; generation_config.json values, overridable per call."""

    do_sample: bool = True
    temperature: float = 0.9
    top_k: int = 50
    top_p: float = 1.0
    repetition_penalty: float = 1.05
    subtalker_dosample: bool = True
    subtalker_temperature: float = 0.9
    subtalker_top_k: int = 50
    subtalker_top_p: float = 1.0
    max_new_tokens: int = 2048  # the wrapper's hard fallback when the file has none

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GenerationConfig:
        return cls(**{k: v for k, v in d.items() if k in cls.__slots__})  # type: ignore[attr-defined]

    def greedy(self) -> GenerationConfig:
        return GenerationConfig(**{**self.to_dict(), "do_sample": False, "subtalker_dosample": False})

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__}  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True)
class Qwen3TTSConfig:
    tts_model_type: str
    tts_model_size: str
    talker: TalkerConfig
    codec: CodecDecoderConfig
    generation: GenerationConfig
    speaker_encoder: SpeakerEncoderConfig | None
    im_start_token_id: int
    im_end_token_id: int
    assistant_token_id: int
    tts_pad_token_id: int
    tts_bos_token_id: int
    tts_eos_token_id: int
    raw: dict[str, Any] = field(repr=False, compare=False, default_factory=dict)
    codec_raw: dict[str, Any] = field(repr=False, compare=False, default_factory=dict)  # speech_tokenizer/config.json

    @property
    def has_codec_encoder(self) -> bool:
        return "encoder_config" in self.codec_raw

    @property
    def codec_encoder(self) -> CodecEncoderConfig | None:
        """The codec encoder's config, parsed and checked when read: only code that builds the encoder reads it
        (Base checkpoints, for voice uploads). Elsewhere it is never used, and the reference serves such checkpoints
        whatever their encoder_config says, so a flaw there must not refuse them."""
        if not self.has_codec_encoder:
            return None
        valid = int(_get(self.codec_raw, "encoder_valid_num_quantizers", CODEC_CONFIG))
        return CodecEncoderConfig.from_dict(self.codec_raw["encoder_config"], valid)

    @property
    def repo_id(self) -> str | None:
        """The official Hugging Face repo of this kind of checkpoint (`Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice`), from
        `tts_model_size` (`1b7` -> 1.7B) and `tts_model_type`; None for a size not written that way."""
        size = re.fullmatch(r"(\d+)b(\d*)", self.tts_model_size.lower())
        if size is None:
            return None
        billions = size[1] + (f".{size[2]}" if size[2] else "")
        return f"Qwen/Qwen3-TTS-12Hz-{billions}B-{REPO_KINDS[self.tts_model_type]}"

    @property
    def speakers(self) -> list[str]:
        return list(self.talker.spk_id)

    @property
    def languages(self) -> list[str]:
        """What the reference wrapper accepts: auto plus every non-dialect language."""
        return ["auto", *(k for k in self.talker.codec_language_id if "dialect" not in k)]

    @property
    def supports_instruct(self) -> bool:
        # The reference drops instruct silently on 0.6B; VoiceDesign requires it.
        return self.tts_model_type == "voice_design" or (
            self.tts_model_type == "custom_voice" and self.tts_model_size != "0b6"
        )


def parse_config(config: dict[str, Any], codec_config: dict[str, Any], generation: dict[str, Any]) -> Qwen3TTSConfig:
    model_type = config.get("model_type")
    if model_type != MODEL_TYPE:
        raise ConfigError(f"config.json: model_type {model_type!r} is not supported (expected {MODEL_TYPE!r})")
    if config.get("tokenizer_type") != TOKENIZER_TYPE:
        raise ConfigError(f"config.json: tokenizer_type {config.get('tokenizer_type')!r} is not supported "
                          f"(only the 12 Hz tokenizer {TOKENIZER_TYPE!r})")
    tts_type = _get(config, "tts_model_type", "config.json")
    if tts_type not in TTS_MODEL_TYPES:
        raise ConfigError(f"config.json: tts_model_type {tts_type!r} is not one of {TTS_MODEL_TYPES}")
    if codec_config.get("model_type") != TOKENIZER_TYPE:
        raise ConfigError(f"speech_tokenizer/config.json: model_type {codec_config.get('model_type')!r} "
                          f"is not supported (expected {TOKENIZER_TYPE!r})")
    spk = config.get("speaker_encoder_config")
    ids = ("im_start_token_id", "im_end_token_id", "assistant_token_id", "tts_pad_token_id", "tts_bos_token_id",
           "tts_eos_token_id")
    return Qwen3TTSConfig(
        tts_model_type=tts_type,
        tts_model_size=str(_get(config, "tts_model_size", "config.json")),
        talker=TalkerConfig.from_dict(_get(config, "talker_config", "config.json")),
        codec=CodecDecoderConfig.from_dict(_get(codec_config, "decoder_config", "speech_tokenizer/config.json")),
        generation=GenerationConfig.from_dict(generation),
        speaker_encoder=SpeakerEncoderConfig.from_dict(spk) if tts_type == "base" and spk else None,
        raw=config,
        codec_raw=codec_config,
        **{k: int(_get(config, k, "config.json")) for k in ids},
    )


def load_config(model_dir: str | Path) -> Qwen3TTSConfig:
    """Parse the three JSON files of a checkpoint directory."""
    d = Path(model_dir)
    for rel in ("config.json", "speech_tokenizer/config.json"):
        if not (d / rel).is_file():
            raise ConfigError(f"{d}: missing {rel}")
    gen_path = d / "generation_config.json"
    generation = json.loads(gen_path.read_text()) if gen_path.is_file() else {}
    return parse_config(
        json.loads((d / "config.json").read_text()),
        json.loads((d / "speech_tokenizer/config.json").read_text()),
        generation,
    )

"""Synthetic Qwen3-ForcedAligner checkpoints: the official file layout (config.json, preprocessor_config.json,
tokenizer files, model.safetensors with `thinker.*` keys) with random weights, loadable by our loader and by the
reference.

The real checkpoint's files are not in shared/, so the config is written from the published architecture of
Qwen3-ForcedAligner-0.6B (docs/aligner.md lists what is assumed). The text tokenizer reuses the Qwen3 byte-level
BPE files of shared/qwen3-tts/text-tokenizer (the same base vocabulary, ids 0-151642) with the aligner's added
tokens: the Qwen3 ones up to <|audio_end|> (151670), <|audio_pad|> at 151676, <timestamp> at 151705 and named
placeholders for the ids between them, whose real names this port never needs.

Weights are random at scales that keep activations finite: unit-variance embeddings, 1/sqrt(fan_in) projections
(residual outputs further divided by sqrt(2 * layers)), norm gains within 1 +- 0.1, small biases. `tiny=True`
shrinks depth and widths for CPU tests and keeps everything structural: 128 mel bins, 100-frame chunks, GQA with
q/k-norm, the full vocabulary and special ids, the 5000-class head.
"""

from __future__ import annotations

import copy
import json
import math
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from ..qwen3tts.model.checkpoint import WEIGHTS
from ..qwen3tts.tools.synthetic import default_shared
from .checkpoint import expected_shapes
from .config import parse_config

AUDIO_CONFIG = dict(num_mel_bins=128, encoder_layers=24, encoder_attention_heads=16, encoder_ffn_dim=4096,
                    d_model=1024, output_dim=1024, n_window=50, n_window_infer=800, downsample_hidden_size=480,
                    max_source_positions=1500, conv_chunksize=500, activation_function="gelu", scale_embedding=False)
TEXT_CONFIG = dict(vocab_size=152064, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                   num_attention_heads=16, num_key_value_heads=8, head_dim=128, rms_norm_eps=1e-6,
                   rope_theta=1_000_000.0, hidden_act="silu", attention_bias=False, tie_word_embeddings=False,
                   max_position_embeddings=65536,
                   rope_scaling=dict(rope_type="default", mrope_section=[24, 20, 20], interleaved=True))
CONFIG: dict[str, Any] = dict(
    architectures=["Qwen3ASRForConditionalGeneration"], model_type="qwen3_asr", timestamp_token_id=151705,
    timestamp_segment_time=80, tie_word_embeddings=False,
    thinker_config=dict(model_type="qwen3_forced_aligner", classify_num=5000, audio_token_id=151676,
                        audio_start_token_id=151669, audio_end_token_id=151670, tie_word_embeddings=False,
                        audio_config=AUDIO_CONFIG, text_config=TEXT_CONFIG))
PREPROCESSOR = dict(feature_extractor_type="WhisperFeatureExtractor", feature_size=128, sampling_rate=16000,
                    hop_length=160, n_fft=400, chunk_length=30, padding_side="right", padding_value=0.0,
                    return_attention_mask=True, dither=0.0, processor_class="Qwen3ASRProcessor")
# n_window_infer 200 (two chunks per attention window) so a few seconds of audio already spans several windows.
TINY_AUDIO = dict(encoder_layers=2, encoder_attention_heads=4, encoder_ffn_dim=64, d_model=32, output_dim=48,
                  downsample_hidden_size=8, n_window_infer=200)
TINY_TEXT = dict(hidden_size=48, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=16, rope_scaling=dict(rope_type="default", mrope_section=[4, 2, 2],
                                                                       interleaved=True))
ADDED = {151676: "<|audio_pad|>", 151705: "<timestamp>"}
LAST_QWEN3_ID = 151670  # <|audio_end|>: the Qwen3 added tokens up to here are taken from the TTS tokenizer


def aligner_config(tiny: bool = False) -> dict[str, Any]:
    cfg = copy.deepcopy(CONFIG)
    if tiny:
        cfg["thinker_config"]["audio_config"].update(TINY_AUDIO)
        cfg["thinker_config"]["text_config"].update(copy.deepcopy(TINY_TEXT))
    return cfg


def tokenizer_config(tts_config: dict[str, Any]) -> dict[str, Any]:
    """The TTS tokenizer_config with the aligner's added tokens and audio token names."""
    base = {int(k): v for k, v in tts_config["added_tokens_decoder"].items() if int(k) <= LAST_QWEN3_ID}
    added = dict(base)
    for idx in range(LAST_QWEN3_ID + 1, max(ADDED) + 1):
        content = ADDED.get(idx, f"<|aligner_reserved_{idx}|>")  # assumed name: never used by the aligner
        added[idx] = dict(content=content, lstrip=False, normalized=False, rstrip=False, single_word=False,
                          special=True)
    cfg = {k: v for k, v in tts_config.items() if k != "added_tokens_decoder"}
    cfg["added_tokens_decoder"] = {str(k): added[k] for k in sorted(added)}
    cfg["additional_special_tokens"] = ["<|audio_start|>", "<|audio_end|>", "<|audio_pad|>", "<timestamp>"]
    cfg["audio_token"], cfg["audio_bos_token"], cfg["audio_eos_token"] = "<|audio_pad|>", "<|audio_start|>", \
        "<|audio_end|>"
    cfg["extra_special_tokens"] = dict(audio_token="<|audio_pad|>", audio_bos_token="<|audio_start|>",
                                       audio_eos_token="<|audio_end|>")
    return cfg


def _tensor(key: str, shape: tuple[int, ...], gen: torch.Generator, residual_scale: float) -> torch.Tensor:
    if key.endswith("embed_tokens.weight"):
        return torch.randn(shape, generator=gen)
    if len(shape) == 1:
        if key.endswith("bias"):
            return 0.02 * torch.randn(shape, generator=gen)
        return 1.0 + 0.1 * (2 * torch.rand(shape, generator=gen) - 1)  # norm gains
    fan_in = math.prod(shape[1:])
    w = torch.randn(shape, generator=gen) / math.sqrt(fan_in)
    if key.endswith(("o_proj.weight", "down_proj.weight", "out_proj.weight", "fc2.weight")):
        w = w * residual_scale
    return w


def write_synthetic_aligner(out: str | Path, tiny: bool = True, seed: int = 0, dtype: torch.dtype = torch.bfloat16,
                            shared: Path | None = None, head_classes: int | None = None,
                            sharpen: bool = False) -> Path:
    """A checkpoint directory at `out` (created); the tokenizer files come from shared/qwen3-tts/text-tokenizer.
    `head_classes`: the head's rows from this class on are zeroed, so (with a positive logit among the others, as
    random weights give) every time is under `head_classes` x 80 ms. Random weights otherwise put most times far past
    a clip's end, clamped there: no word lands inside a clip, which a trained aligner's words do.
    `sharpen`: with plain random weights every `<timestamp>` slot predicts the same class (near-uniform attention
    averages the same clip for every slot); sharper attention (the decoder's q/k-norm gains x4) with a stronger say
    in the residual stream (its o_proj x8, exact powers of two) makes the classes vary along the prompt, out of
    order, so the repair has work to do and words land apart."""
    out = Path(out)
    tok = (shared or default_shared()) / "qwen3-tts" / "text-tokenizer"
    if not (tok / "vocab.json").is_file():
        raise FileNotFoundError(f"{tok}: no Qwen3 text-tokenizer files (is the shared folder right?)")
    out.mkdir(parents=True, exist_ok=True)
    raw = aligner_config(tiny)
    cfg = parse_config(raw)
    (out / "config.json").write_text(json.dumps(raw, indent=2))
    (out / "preprocessor_config.json").write_text(json.dumps(PREPROCESSOR, indent=2))
    for name in ("vocab.json", "merges.txt"):
        shutil.copyfile(tok / name, out / name)
    tts = json.loads((tok / "tokenizer_config.json").read_text(encoding="utf-8"))
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(tts), indent=2, ensure_ascii=False))
    gen = torch.Generator().manual_seed(seed)
    layers = max(cfg.audio.encoder_layers, cfg.text.num_hidden_layers)
    state = {k: _tensor(k, s, gen, 1 / math.sqrt(2 * layers)).to(dtype).contiguous()
             for k, s in sorted(expected_shapes(cfg).items())}
    if head_classes is not None:
        state["thinker.lm_head.weight"][head_classes:] = 0
    for key in state if sharpen else ():
        if key.startswith("thinker.model.layers.") and key.endswith(("q_norm.weight", "k_norm.weight")):
            state[key] *= 4
        elif key.startswith("thinker.model.layers.") and key.endswith("o_proj.weight"):
            state[key] *= 8
    save_file(state, str(out / WEIGHTS), metadata={"format": "pt"})
    return out

"""Import and build the reference forced aligner (`qwen-asr==0.0.6`, installed with --no-deps) as a test oracle.

qwen_asr imports librosa, soundfile and nagisa at package import, for paths these tests never run (audio files,
resampling, Japanese). They are stubbed as for qwen-tts (tests/qwen3tts/reference.py); soynlp (Korean) is only
imported on use. Audio given to the reference is already 16 kHz, so its resampler is never called.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from qwen3tts import reference as tts_reference
from safetensors.torch import load_file


def import_reference() -> Any:
    if importlib.util.find_spec("qwen_asr") is None:
        reason = "reference oracle missing: pip install --no-deps qwen-asr==0.0.6"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{reason} (CI=true requires it)", pytrace=False)
        pytest.skip(reason)
    tts_reference.install_stubs()
    if "nagisa" not in sys.modules and importlib.util.find_spec("nagisa") is None:
        sys.modules["nagisa"] = tts_reference._stub("nagisa")
    import qwen_asr.inference.qwen3_forced_aligner as aligner

    return aligner


def confine_to_windows(model: Any) -> None:
    """Make the reference encoder's eager attention stay inside its attention windows (`cu_seqlens`), as its
    flash-attention path and its vLLM backend run it. Its eager and SDPA paths pass no mask and so attend over the
    whole clip, which only differs for clips longer than one window (8 s in the real config). The mask is the
    reference's own (`_prepare_attention_mask`)."""
    tower = model.thinker.audio_tower
    for layer in tower.layers:
        def forward(hidden_states, cu_seqlens, attention_mask=None, _forward=layer.forward, **kwargs):
            if attention_mask is None:
                attention_mask = tower._prepare_attention_mask(hidden_states, cu_seqlens)
            return _forward(hidden_states, cu_seqlens, attention_mask=attention_mask, **kwargs)

        layer.forward = forward


def reference_model(ckpt: Path, windowed: bool = True) -> Any:
    """Qwen3ASRForConditionalGeneration (fp32, eager attention) with the checkpoint's tensors, strictly loaded;
    `windowed`: see confine_to_windows."""
    import_reference()
    from qwen_asr.core.transformers_backend import Qwen3ASRConfig, Qwen3ASRForConditionalGeneration

    cfg = Qwen3ASRConfig(**json.loads((ckpt / "config.json").read_text()))
    for c in (cfg, cfg.thinker_config, cfg.thinker_config.audio_config, cfg.thinker_config.text_config):
        c._attn_implementation = "eager"
    model = Qwen3ASRForConditionalGeneration(cfg)
    model.load_state_dict(load_file(str(ckpt / "model.safetensors")), strict=True)
    if windowed:
        confine_to_windows(model)
    return model.float().eval()


def reference_aligner(ckpt: Path, windowed: bool = True) -> Any:
    """The reference's `Qwen3ForcedAligner` wrapper around reference_model, with the processor it builds from the
    checkpoint's files (Whisper features + Qwen2 tokenizer)."""
    aligner = import_reference()
    from qwen_asr.core.transformers_backend import Qwen3ASRProcessor
    from transformers import Qwen2TokenizerFast, WhisperFeatureExtractor

    processor = Qwen3ASRProcessor(feature_extractor=WhisperFeatureExtractor.from_pretrained(str(ckpt)),
                                  tokenizer=Qwen2TokenizerFast.from_pretrained(str(ckpt)))
    return aligner.Qwen3ForcedAligner(reference_model(ckpt, windowed), processor, aligner.Qwen3ForceAlignProcessor())


def reference_inputs(ref: Any, audio_16k: np.ndarray, text: str) -> tuple[list[str], dict[str, torch.Tensor]]:
    """(units, processor outputs) exactly as `Qwen3ForcedAligner.align` prepares them for one clip."""
    units, prompt = ref.aligner_processor.encode_timestamp(text, "English")
    inputs = ref.processor(text=[prompt], audio=[audio_16k], return_tensors="pt", padding=True)
    return units, inputs

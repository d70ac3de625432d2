"""Loading a Qwen3-ForcedAligner checkpoint: config.json + model.safetensors (or shards) with the official
`thinker.*` key names, built on the meta device and filled through the TTS loader's strict key/shape check."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ..qwen3tts.model.checkpoint import load_into, resolve, weight_files
from .config import AlignerConfig, load_config
from .features import check_preprocessor
from .model import AlignerWeights, Thinker

PREPROCESSOR = "preprocessor_config.json"  # the features' parameters, checked against ours when present


def load_aligner(path_or_id: str | Path, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
                 progress: bool = False) -> tuple[Path, AlignerConfig, Thinker]:
    """(directory, config, thinker in eval mode) of a local directory or a Hugging Face repo id."""
    directory = resolve(path_or_id)
    cfg = load_config(directory)
    pre = directory / PREPROCESSOR
    if pre.is_file():
        check_preprocessor(json.loads(pre.read_text()), cfg.audio.num_mel_bins, str(pre))
    with torch.device("meta"):
        weights = AlignerWeights(cfg)
    load_into(weights, weight_files(directory), dtype, torch.device(device), "aligner", progress=progress)
    return directory, cfg, weights.thinker.eval()


def expected_shapes(cfg: AlignerConfig) -> dict[str, tuple[int, ...]]:
    """Key -> shape of the checkpoint's `model.safetensors`, computed on the meta device."""
    with torch.device("meta"):
        weights = AlignerWeights(cfg)
    return {k: tuple(v.shape) for k, v in weights.state_dict().items()}

"""A tiny synthetic aligner checkpoint, written once per session."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from qwen3tts.shared import require_shared
from safetensors.torch import load_file, save_file


@pytest.fixture(scope="session")
def aligner_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from voxgate.engine.aligner.synthetic import write_synthetic_aligner

    shared = require_shared()
    require_shared("qwen3-tts", "text-tokenizer")
    ckpt = write_synthetic_aligner(tmp_path_factory.mktemp("aligner"), tiny=True, seed=7, shared=shared)
    # With plain random weights every <timestamp> slot predicts the same class: near-uniform attention averages the
    # same clip for every slot. Sharper attention (q/k-norm gains x4) with a stronger say in the residual stream
    # (o_proj x8) makes the classes vary along the prompt, out of order, so the repair has work to do.
    state = load_file(str(ckpt / "model.safetensors"))
    for key in state:
        if key.startswith("thinker.model.layers."):
            if key.endswith(("q_norm.weight", "k_norm.weight")):
                state[key] *= 4
            elif key.endswith("o_proj.weight"):
                state[key] *= 8
    save_file(state, str(ckpt / "model.safetensors"), metadata={"format": "pt"})
    return ckpt


@pytest.fixture(scope="session")
def ref_aligner(aligner_ckpt: Path) -> Any:
    """The reference's Qwen3ForcedAligner on the same checkpoint (encoder windows as its flash-attention path)."""
    from .reference import reference_aligner

    return reference_aligner(aligner_ckpt)


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)

"""The tiny synthetic aligner checkpoint of the aligner tests (and of the engine's word-times tests)."""

from __future__ import annotations

from pathlib import Path

from qwen3tts.shared import require_shared
from safetensors.torch import load_file, save_file


def write_sharp_aligner(out: Path, seed: int = 7, classes: int | None = None) -> Path:
    """A tiny aligner checkpoint in `out` whose predicted times vary along the prompt (skips without shared data).
    `classes`: every time under `classes` x 80 ms (write_synthetic_aligner's `head_classes`): times inside short clips,
    not clamped to their ends."""
    from voxgate.engine.aligner.synthetic import write_synthetic_aligner

    shared = require_shared()
    require_shared("qwen3-tts", "text-tokenizer")
    ckpt = write_synthetic_aligner(out, tiny=True, seed=seed, shared=shared, head_classes=classes)
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

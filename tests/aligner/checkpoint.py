"""The tiny synthetic aligner checkpoint of the aligner tests (and of the engine's word-times tests)."""

from __future__ import annotations

from pathlib import Path

from qwen3tts.shared import require_shared


def write_sharp_aligner(out: Path, seed: int = 7, classes: int | None = None) -> Path:
    """A tiny aligner checkpoint in `out` whose predicted times vary along the prompt (skips without shared data).
    `classes`: every time under `classes` x 80 ms (write_synthetic_aligner's `head_classes`): times inside short clips,
    not clamped to their ends."""
    from voxgate.engine.aligner.synthetic import write_synthetic_aligner

    shared = require_shared()
    require_shared("qwen3-tts", "text-tokenizer")
    return write_synthetic_aligner(out, tiny=True, seed=seed, shared=shared, head_classes=classes, sharpen=True)

"""Deterministic test clips for the aligner tests."""

from __future__ import annotations

import numpy as np


def clip(seconds: float, rate: int = 16_000, seed: int = 0, peak: float = 0.5) -> np.ndarray:
    """A deterministic speech-like clip: a few gliding tones under bursts, plus noise, scaled to `peak`."""
    rng = np.random.default_rng(seed)
    t = np.arange(round(seconds * rate)) / rate
    tones = sum(np.sin(2 * np.pi * (f + 40 * np.sin(2 * np.pi * 0.7 * t)) * t) for f in rng.uniform(120, 2400, 4))
    bursts = 0.5 + 0.5 * np.sign(np.sin(2 * np.pi * rng.uniform(2, 5) * t))
    x = tones * bursts + 0.3 * rng.standard_normal(t.size)
    return (peak * x / np.abs(x).max()).astype(np.float32)

"""16-bit PCM WAV I/O with the standard library (no soundfile dependency)."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np


def to_int16(audio: np.ndarray) -> np.ndarray:
    return (np.clip(audio, -1.0, 1.0) * 32767.0).round().astype(np.int16)


def write_wav(path: str | Path, audio: np.ndarray, sample_rate: int = 24_000) -> None:
    pcm = audio if audio.dtype == np.int16 else to_int16(audio)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(sample_rate)
        w.writeframes(pcm.tobytes())


def read_wav(path: str | Path) -> tuple[np.ndarray, int]:
    """Mono float32 in [-1, 1] and the sample rate (16-bit PCM; channels are averaged)."""
    with wave.open(str(path), "rb") as w:
        if w.getsampwidth() != 2:
            raise ValueError(f"{path}: only 16-bit PCM WAV is supported")
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16).astype(np.float32) / 32768.0
        return pcm.reshape(-1, w.getnchannels()).mean(axis=1), w.getframerate()

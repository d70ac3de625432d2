"""The aligner's audio front end: 16 kHz mono -> Whisper-style log-mel features [n_mels, frames].

The checkpoint's processor is a Whisper feature extractor: 400-point periodic-Hann STFT every 160 samples, centred
(reflect padding), power spectrum, 128 slaney mel filters over 0-8 kHz, log10 floored at 1e-10, then clamped to 8
(log10 units) below the clip's maximum and mapped by (x + 4) / 4. The last STFT frame is dropped, so a clip of N
samples gives N // 160 frames (10 ms each).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..qwen3tts.model.config import ConfigError
from ..qwen3tts.model.speaker_encoder import mel_filterbank

SAMPLE_RATE = 16_000
N_FFT, HOP, FMAX = 400, 160, 8_000.0


def check_preprocessor(raw: dict[str, Any], n_mels: int, where: str) -> None:
    """A checkpoint's preprocessor_config.json must describe these features (they are constants here)."""
    want = {"feature_extractor_type": "WhisperFeatureExtractor", "sampling_rate": SAMPLE_RATE, "hop_length": HOP,
            "n_fft": N_FFT, "feature_size": n_mels}
    wrong = {k: raw.get(k) for k, v in want.items() if raw.get(k, v) != v}
    if wrong or raw.get("dither", 0.0) != 0.0:
        raise ConfigError(f"{where}: features this port does not compute: {wrong or {'dither': raw['dither']}} "
                          f"(expected {want}, no dither)")


def peak_limited(audio: np.ndarray) -> np.ndarray:
    """float32 audio scaled down to a peak of 1 when it is louder (then clipped), as the reference's input
    normalisation does; quieter audio is kept as is. The features are not scale-invariant, so this matters."""
    audio = np.asarray(audio, dtype=np.float32)
    peak = float(np.abs(audio).max()) if audio.size else 0.0
    return np.clip(audio / peak, -1.0, 1.0) if peak > 1.0 else audio


def log_mel(audio: torch.Tensor, n_mels: int = 128) -> torch.Tensor:
    """audio [N] float32 at 16 kHz -> features [n_mels, N // 160] (float32)."""
    if audio.dim() != 1 or audio.numel() < N_FFT // 2 + 1:
        raise ValueError(f"log_mel takes one clip of at least {N_FFT // 2 + 1} samples, got {tuple(audio.shape)}")
    audio = audio.to(torch.float32)
    window = torch.hann_window(N_FFT, device=audio.device)
    spec = torch.stft(audio, N_FFT, HOP, window=window, center=True, pad_mode="reflect", return_complex=True)
    power = spec[:, :-1].abs() ** 2  # [n_fft // 2 + 1, frames]
    basis = torch.from_numpy(mel_filterbank(SAMPLE_RATE, N_FFT, n_mels, 0.0, FMAX)).to(audio.device)
    logmel = torch.clamp(basis @ power, min=1e-10).log10()
    logmel = torch.maximum(logmel, logmel.max() - 8.0)
    return (logmel + 4.0) / 4.0

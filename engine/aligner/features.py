"""The aligner's audio front end: 16 kHz mono -> Whisper-style log-mel features [n_mels, frames].

The checkpoint's processor is a Whisper feature extractor: 400-point periodic-Hann STFT every 160 samples, centred
(reflect padding), power spectrum, 128 slaney mel filters over 0-8 kHz, log10 floored at 1e-10, then clamped to 8
(log10 units) below the clip's maximum and mapped by (x + 4) / 4. The last STFT frame is dropped, so a clip of N
samples gives N // 160 frames (10 ms each).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import torch

from ..graphs import to_device
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


@functools.lru_cache(maxsize=8)
def _mel_basis(n_mels: int, device: torch.device) -> torch.Tensor:
    """The slaney mel filters [n_mels, n_fft // 2 + 1] on `device`, made once per device (not per call)."""
    return torch.from_numpy(mel_filterbank(SAMPLE_RATE, N_FFT, n_mels, 0.0, FMAX)).to(device)


def log_mel(audio: torch.Tensor, n_mels: int = 128) -> torch.Tensor:
    """audio [N] float32 at 16 kHz -> features [n_mels, N // 160] (float32)."""
    if audio.dim() != 1 or audio.numel() < N_FFT // 2 + 1:
        raise ValueError(f"log_mel takes one clip of at least {N_FFT // 2 + 1} samples, got {tuple(audio.shape)}")
    audio = audio.to(torch.float32)
    window = torch.hann_window(N_FFT, device=audio.device)
    spec = torch.stft(audio, N_FFT, HOP, window=window, center=True, pad_mode="reflect", return_complex=True)
    power = spec[:, :-1].abs() ** 2  # [n_fft // 2 + 1, frames]
    logmel = torch.clamp(_mel_basis(n_mels, audio.device) @ power, min=1e-10).log10()
    logmel = torch.maximum(logmel, logmel.max() - 8.0)
    return (logmel + 4.0) / 4.0


def clips_on_device(clips_16k: list[np.ndarray], device: torch.device) -> list[torch.Tensor]:
    """Clips as float32 tensors on `device`, peak-limited (`peak_limited`), through one host-to-device copy (views
    of one flat tensor: one copy of many small clips costs far less than a copy each; from pinned memory, so the
    host does not wait for the stream's queued work)."""
    host = [peak_limited(c) for c in clips_16k]
    if not host:
        return []
    return list(torch.split(to_device(torch.from_numpy(np.concatenate(host)), device), [len(c) for c in host]))


def log_mel_batch(clips: list[torch.Tensor], n_mels: int = 128) -> tuple[torch.Tensor, list[int]]:
    """B clips [N_b] at 16 kHz (one device) -> (features [B, n_mels, max frames], N_b // 160 frames per clip).

    Each clip's features are log_mel's (its own reflect padding and its own max), zeros past its frames: the clips
    are reflect-padded by one gather from their concatenation, right-padded with zeros to the longest, and go
    through one STFT; a frame never reaches past its clip's padding, and the max is taken over the clip's frames.
    The gather's index and the masks are computed on the clips' device (a [B, samples] index built on the host
    and copied over cost more than the rest of the features together at 128 clips).
    """
    pad = N_FFT // 2
    lengths = [int(c.numel()) for c in clips]
    if any(c.dim() != 1 or n < pad + 1 for c, n in zip(clips, lengths, strict=True)):
        shapes = [tuple(c.shape) for c in clips]
        raise ValueError(f"log_mel_batch takes 1-D clips of at least {pad + 1} samples, got {shapes}")
    device = clips[0].device
    # one cast of the whole (cat promotes mixed dtypes), not a dispatch a clip under the GIL
    flat = torch.cat([*clips, clips[0].new_zeros(1, dtype=torch.float32)]).to(torch.float32)
    n = to_device(torch.tensor(lengths), device)[:, None]  # [B, 1]
    at = torch.arange(-pad, max(lengths) + pad, device=device)[None, :]  # [1, S]: sample positions, padding included
    mirrored = torch.where(at.abs() >= n, 2 * (n - 1) - at.abs(), at.abs())  # reflect padding at both ends
    start = torch.cumsum(n, 0) - n
    index = torch.where(at < n + pad, start + mirrored, flat.numel() - 1)  # past a clip: the trailing zero
    padded = flat[index]
    window = torch.hann_window(N_FFT, device=device)
    frames = [length // HOP for length in lengths]
    spec = torch.stft(padded, N_FFT, HOP, window=window, center=False, return_complex=True)[..., : max(frames)]
    logmel = torch.clamp(_mel_basis(n_mels, device) @ (spec.abs() ** 2), min=1e-10).log10()  # [B, n_mels, T]
    valid = (torch.arange(max(frames), device=device) < n // HOP)[:, None, :]
    peak = logmel.masked_fill(~valid, -torch.inf).amax(dim=(1, 2), keepdim=True)
    logmel = torch.maximum(logmel, peak - 8.0)
    return ((logmel + 4.0) / 4.0).masked_fill(~valid, 0.0), frames

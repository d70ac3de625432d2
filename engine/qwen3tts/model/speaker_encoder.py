"""ECAPA-TDNN speaker encoder (Base checkpoints): 24 kHz audio -> x-vector of the Talker's width (design §7).

Convolutions use "same" reflect padding. Module names mirror the `speaker_encoder.*` checkpoint keys.
"""

from __future__ import annotations

import math
from functools import cache

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .config import SpeakerEncoderConfig

N_FFT, HOP, WIN, FMIN, FMAX = 1024, 256, 1024, 0.0, 12_000.0


def _hz_to_mel(f: np.ndarray) -> np.ndarray:
    """Slaney mel scale: linear below 1 kHz, logarithmic above."""
    f = np.asarray(f, dtype=np.float64)
    lin = f / (200.0 / 3)
    log = 15.0 + np.log(np.maximum(f, 1e-10) / 1000.0) / (math.log(6.4) / 27.0)
    return np.where(f >= 1000.0, log, lin)


def _mel_to_hz(m: np.ndarray) -> np.ndarray:
    m = np.asarray(m, dtype=np.float64)
    lin = m * (200.0 / 3)
    log = 1000.0 * np.exp((math.log(6.4) / 27.0) * (m - 15.0))
    return np.where(m >= 15.0, log, lin)


@cache
def mel_filterbank(sr: int, n_fft: int, n_mels: int, fmin: float, fmax: float) -> np.ndarray:
    """Slaney-normalised triangular filters [n_mels, n_fft // 2 + 1] (float32), as librosa's default builds them."""
    fft_freqs = np.linspace(0, sr / 2, n_fft // 2 + 1)
    mel_pts = _mel_to_hz(np.linspace(_hz_to_mel(np.array(fmin)), _hz_to_mel(np.array(fmax)), n_mels + 2))
    fdiff = np.diff(mel_pts)
    ramps = mel_pts[:, None] - fft_freqs[None, :]
    lower = -ramps[:-2] / fdiff[:-1, None]
    upper = ramps[2:] / fdiff[1:, None]
    weights = np.maximum(0, np.minimum(lower, upper))
    weights *= (2.0 / (mel_pts[2:] - mel_pts[:-2]))[:, None]
    return weights.astype(np.float32)


def log_mel(audio: torch.Tensor, sr: int = 24_000, n_mels: int = 128) -> torch.Tensor:
    """audio [B, N] float32 in [-1, 1] -> log-mel [B, n_mels, frames] (reflect pad 384, no centering)."""
    basis = torch.from_numpy(mel_filterbank(sr, N_FFT, n_mels, FMIN, FMAX)).to(audio.device)
    pad = (N_FFT - HOP) // 2
    y = F.pad(audio[:, None], (pad, pad), mode="reflect")[:, 0]
    spec = torch.stft(y, N_FFT, hop_length=HOP, win_length=WIN, window=torch.hann_window(WIN, device=audio.device),
                      center=False, normalized=False, onesided=True, return_complex=True)
    mag = torch.sqrt(torch.view_as_real(spec).pow(2).sum(-1) + 1e-9)
    return torch.log(torch.clamp(basis @ mag, min=1e-5))


class TDNN(nn.Module):
    def __init__(self, cin: int, cout: int, kernel: int, dilation: int) -> None:
        super().__init__()
        self.conv = nn.Conv1d(cin, cout, kernel, dilation=dilation, padding="same", padding_mode="reflect")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x))


class Res2Net(nn.Module):
    def __init__(self, channels: int, scale: int, kernel: int, dilation: int) -> None:
        super().__init__()
        self.scale = scale
        self.blocks = nn.ModuleList(TDNN(channels // scale, channels // scale, kernel, dilation)
                                    for _ in range(scale - 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        parts = list(torch.chunk(x, self.scale, dim=1))
        out = [parts[0]]
        prev = None
        for i in range(1, self.scale):
            prev = self.blocks[i - 1](parts[i] if prev is None else parts[i] + prev)
            out.append(prev)
        return torch.cat(out, dim=1)


class SqueezeExcite(nn.Module):
    def __init__(self, channels: int, se_channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv1d(channels, se_channels, 1, padding="same", padding_mode="reflect")
        self.conv2 = nn.Conv1d(se_channels, channels, 1, padding="same", padding_mode="reflect")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = torch.relu(self.conv1(x.mean(dim=2, keepdim=True)))
        return x * torch.sigmoid(self.conv2(s))


class SERes2NetBlock(nn.Module):
    def __init__(self, cin: int, cout: int, scale: int, se_channels: int, kernel: int, dilation: int) -> None:
        super().__init__()
        self.tdnn1 = TDNN(cin, cout, 1, 1)
        self.res2net_block = Res2Net(cout, scale, kernel, dilation)
        self.tdnn2 = TDNN(cout, cout, 1, 1)
        self.se_block = SqueezeExcite(cout, se_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.se_block(self.tdnn2(self.res2net_block(self.tdnn1(x))))


def _stats(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    mean = (w * x).sum(2)
    std = torch.sqrt((w * (x - mean[..., None]).pow(2)).sum(2).clamp(1e-12))
    return mean, std


class AttentiveStatsPool(nn.Module):
    def __init__(self, channels: int, attention_channels: int) -> None:
        super().__init__()
        self.tdnn = TDNN(channels * 3, attention_channels, 1, 1)
        self.conv = nn.Conv1d(attention_channels, channels, 1, padding="same", padding_mode="reflect")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[-1]
        uniform = torch.full((x.shape[0], 1, t), 1.0 / t, dtype=x.dtype, device=x.device)
        mean, std = _stats(x, uniform)  # global context for the attention
        ctx = torch.cat([x, mean[..., None].expand(-1, -1, t), std[..., None].expand(-1, -1, t)], dim=1)
        attn = torch.softmax(self.conv(torch.tanh(self.tdnn(ctx))), dim=2)
        mean, std = _stats(x, attn)
        return torch.cat((mean, std), dim=1)[..., None]


class SpeakerEncoder(nn.Module):
    def __init__(self, cfg: SpeakerEncoderConfig) -> None:
        super().__init__()
        self.cfg = cfg
        ch, ks, dl = cfg.enc_channels, cfg.enc_kernel_sizes, cfg.enc_dilations
        self.blocks = nn.ModuleList(
            [TDNN(cfg.mel_dim, ch[0], ks[0], dl[0]),
             *(SERes2NetBlock(ch[i - 1], ch[i], cfg.enc_res2net_scale, cfg.enc_se_channels, ks[i], dl[i])
               for i in range(1, len(ch) - 1))]
        )
        self.mfa = TDNN(ch[-1], ch[-1], ks[-1], dl[-1])
        self.asp = AttentiveStatsPool(ch[-1], cfg.enc_attention_channels)
        self.fc = nn.Conv1d(ch[-1] * 2, cfg.enc_dim, 1, padding="same", padding_mode="reflect")

    def forward(self, mels: torch.Tensor) -> torch.Tensor:
        """mels [B, n_mels, frames] -> x-vectors [B, enc_dim]."""
        x = mels
        outs = []
        for block in self.blocks:
            x = block(x)
            outs.append(x)
        x = self.mfa(torch.cat(outs[1:], dim=1))
        return self.fc(self.asp(x))[..., 0]

    @torch.inference_mode()
    def embed(self, audio: np.ndarray | torch.Tensor, sr: int) -> torch.Tensor:
        """Mono float audio at 24 kHz -> x-vector [enc_dim] in the encoder's dtype."""
        if sr != self.cfg.sample_rate:
            raise ValueError(f"speaker encoder needs {self.cfg.sample_rate} Hz audio, got {sr} Hz")
        wav = torch.as_tensor(audio, dtype=torch.float32)[None]
        p = next(self.parameters())
        mels = log_mel(wav.to(p.device), sr, self.cfg.mel_dim)
        return self(mels.to(p.dtype))[0]

"""The aligner's audio encoder: log-mel [n_mels, T] -> one hidden vector per 80 ms [N, output_dim].

Mel frames are cut into chunks of 100 (1 s; the last one shorter). Each chunk goes through three stride-2 3x3 convs
(8x fewer frames: 100 -> 13), a linear over channels x mel bins, and sinusoidal positions that restart in every
chunk. The valid frames of all chunks are then concatenated and a Whisper-style transformer runs over them with
attention confined to windows of `chunks_per_window` chunks (bidirectional inside a window, nothing across).
When there is more than one chunk, every chunk (the short last one too) is zero-padded to 100 frames before the
convs, as the reference does: the padding reaches the last valid frames through the second and third conv.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .config import CHUNK_FRAMES, AudioEncoderConfig


def conv_frames(n: int) -> int:
    """Frames after the three stride-2 convs (kernel 3, padding 1) of n mel frames."""
    for _ in range(3):
        n = (n - 1) // 2 + 1
    return n


def encoder_frames(mel_frames: int) -> int:
    """Encoder output frames (= <|audio_pad|> tokens) of a clip of mel_frames frames."""
    full, rest = divmod(mel_frames, CHUNK_FRAMES)
    return full * conv_frames(CHUNK_FRAMES) + (conv_frames(rest) if rest else 0)


def sinusoids(length: int, channels: int, max_timescale: float = 10_000.0) -> torch.Tensor:
    """[length, channels]: sin of the first half of the frequencies, then cos."""
    half = channels // 2
    inv_timescales = torch.exp(-(math.log(max_timescale) / (half - 1)) * torch.arange(half).float())
    scaled = torch.arange(length)[:, None] * inv_timescales[None, :]
    return torch.cat([scaled.sin(), scaled.cos()], dim=1)


class EncoderAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.q_proj = nn.Linear(dim, dim)
        self.k_proj = nn.Linear(dim, dim)
        self.v_proj = nn.Linear(dim, dim)
        self.out_proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """x [W, S, D]: W rows of S frames; valid [W, S] marks the keys every frame of a row may see (a window a
        row, its real frames), or [W, S, S] the keys each frame may see (windows packed: engine/aligner/windows.py)."""
        w, s, d = x.shape
        q, k, v = (p(x).view(w, s, self.heads, -1).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
        mask = valid[:, None, None, :] if valid.dim() == 2 else valid[:, None]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.out_proj(out.transpose(1, 2).reshape(w, s, d))


class EncoderLayer(nn.Module):
    """Pre-LayerNorm: x += attn(ln(x)); x += fc2(gelu(fc1(ln(x))))."""

    def __init__(self, dim: int, heads: int, ffn: int) -> None:
        super().__init__()
        self.self_attn = EncoderAttention(dim, heads)
        self.self_attn_layer_norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, ffn)
        self.fc2 = nn.Linear(ffn, dim)
        self.final_layer_norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.self_attn_layer_norm(x), valid)
        return x + self.fc2(F.gelu(self.fc1(self.final_layer_norm(x))))


class AudioEncoder(nn.Module):
    """`thinker.audio_tower.*`."""

    def __init__(self, cfg: AudioEncoderConfig) -> None:
        super().__init__()
        self.cfg = cfg
        c = cfg.downsample_hidden_size
        self.conv2d1 = nn.Conv2d(1, c, 3, 2, padding=1)
        self.conv2d2 = nn.Conv2d(c, c, 3, 2, padding=1)
        self.conv2d3 = nn.Conv2d(c, c, 3, 2, padding=1)
        self.conv_out = nn.Linear(c * conv_frames(cfg.num_mel_bins), cfg.d_model, bias=False)
        self.layers = nn.ModuleList(EncoderLayer(cfg.d_model, cfg.encoder_attention_heads, cfg.encoder_ffn_dim)
                                    for _ in range(cfg.encoder_layers))
        self.ln_post = nn.LayerNorm(cfg.d_model)
        self.proj1 = nn.Linear(cfg.d_model, cfg.d_model)
        self.proj2 = nn.Linear(cfg.d_model, cfg.output_dim)

    def embed_chunks(self, mel: torch.Tensor) -> torch.Tensor:
        """mel [n_mels, T] -> the valid conv frames of every chunk, positions added, concatenated [N, d_model]."""
        t = mel.shape[1]
        lengths = [CHUNK_FRAMES] * (t // CHUNK_FRAMES) + ([t % CHUNK_FRAMES] if t % CHUNK_FRAMES else [])
        width = max(lengths)
        chunks = torch.zeros(len(lengths), 1, mel.shape[0], width, dtype=mel.dtype, device=mel.device)
        for i, n in enumerate(lengths):
            chunks[i, 0, :, :n] = mel[:, i * CHUNK_FRAMES: i * CHUNK_FRAMES + n]
        x = F.gelu(self.conv2d3(F.gelu(self.conv2d2(F.gelu(self.conv2d1(chunks))))))  # [n, C, F', t']
        n, c, f, tc = x.shape
        x = self.conv_out(x.permute(0, 3, 1, 2).reshape(n, tc, c * f))  # [n, t', d]
        x = x + sinusoids(tc, self.cfg.d_model).to(x.device, x.dtype)[None]
        return torch.cat([x[i, : conv_frames(m)] for i, m in enumerate(lengths)])

    def window_size(self, mel_frames: int) -> int:
        """Encoder frames per attention window: chunks_per_window padded-chunk widths (one short clip: its own)."""
        return conv_frames(min(mel_frames, CHUNK_FRAMES)) * self.cfg.chunks_per_window

    def forward(self, mel: torch.Tensor, windowed: bool = True) -> torch.Tensor:
        """mel [n_mels, T] (one clip) -> [encoder_frames(T), output_dim]. windowed=False attends over the whole clip,
        as the reference's eager/SDPA path does (its flash-attention and vLLM paths use the windows)."""
        x = self.embed_chunks(mel)
        total, dim = x.shape
        size = self.window_size(mel.shape[1]) if windowed else total
        windows = -(-total // size)
        padded = torch.zeros(windows * size, dim, dtype=x.dtype, device=x.device)
        padded[:total] = x
        valid = (torch.arange(windows * size, device=x.device) < total).view(windows, size)
        h = padded.view(windows, size, dim)
        for layer in self.layers:
            h = layer(h, valid)
        h = h.reshape(windows * size, dim)[:total]
        return self.proj2(F.gelu(self.proj1(self.ln_post(h))))

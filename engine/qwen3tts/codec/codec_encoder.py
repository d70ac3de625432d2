"""The 12 Hz codec encoder (24 kHz audio -> 16 codes per 80 ms frame), for in-context voice cloning (design §8).

It is the encoder half of a Mimi codec: a causal SEANet (24 kHz -> 25 Hz, 512 channels), a causal transformer at
25 Hz, a stride-2 downsample to 12.5 Hz, then split residual vector quantization (one semantic codebook, then the
acoustic ones on the same embedding). Only the first `valid_num_quantizers` (16) codes are kept; a residual
quantizer's first n codes do not depend on later codebooks, so the rest are never computed.

Exactness against the reference (`transformers` 4.57.3 `MimiModel.encode`, SDPA attention) is part of the contract:
a code is an argmin over 2048 distances, so this module repeats the reference's operations in the same order and
with the same calls (padding, then conv; SDPA with `is_causal`; `torch.cdist` over the same [1, T, D] rows).

Two facts of that reference shape this file:
- Every SEANet conv is causal with zero padding: (k - 1) * d + 1 - stride zeros on the left, then zeros on the right
  up to a whole number of strides. The downsample conv pads by repeating edge samples instead.
- The config's `sliding_window` (250) is not applied: the reference builds a plain causal mask, so attention spans
  the whole utterance. This port does the same (inputs longer than 10 s would differ otherwise).

Module names mirror `speech_tokenizer/model.safetensors` under the `encoder.` prefix.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..model.config import CodecEncoderConfig
from ..model.layers import apply_rope, rope_tables
from .codec import LayerScale


class EncoderConv(nn.Module):
    """A strided causal conv: left pad (k-1)*d + 1 - stride, right pad to a whole number of strides."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int = 1, dilation: int = 1, bias: bool = True,
                 pad_mode: str = "constant") -> None:
        super().__init__()
        self.conv = nn.Conv1d(cin, cout, kernel, stride, dilation=dilation, bias=bias)
        self.stride = stride
        self.left = (kernel - 1) * dilation + 1 - stride
        self.pad_mode = pad_mode

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        length = x.shape[-1]
        right = -length % self.stride  # output length is ceil(length / stride)
        return self.conv(F.pad(x, (self.left, right), mode=self.pad_mode))


class ResnetBlock(nn.Module):
    """SEANet residual block: x + conv1(elu(conv_k(elu(x)))), halving the channels inside (`block.0..3`)."""

    def __init__(self, dim: int, hidden: int, kernel: int, dilation: int) -> None:
        super().__init__()
        self.block = nn.ModuleList([nn.ELU(), EncoderConv(dim, hidden, kernel, dilation=dilation),
                                    nn.ELU(), EncoderConv(hidden, dim, 1)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x
        for m in self.block:
            y = m(y)
        return x + y


class SEANetEncoder(nn.Module):
    """Audio [B, 1, N] -> [B, hidden, ceil(N / hop)]; `layers.*` indices match the checkpoint (ELUs included)."""

    def __init__(self, cfg: CodecEncoderConfig) -> None:
        super().__init__()
        layers: list[nn.Module] = [EncoderConv(1, cfg.num_filters, cfg.kernel_size)]
        dim = cfg.num_filters
        for ratio in reversed(cfg.upsampling_ratios):
            layers += [ResnetBlock(dim, dim // cfg.compress, cfg.residual_kernel_size, cfg.dilation_growth_rate**j)
                       for j in range(cfg.num_residual_layers)]
            layers += [nn.ELU(), EncoderConv(dim, 2 * dim, 2 * ratio, stride=ratio)]
            dim *= 2
        layers += [nn.ELU(), EncoderConv(dim, cfg.hidden_size, cfg.last_kernel_size)]
        self.layers = nn.ModuleList(layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for m in self.layers:
            x = m(x)
        return x


class EncoderAttention(nn.Module):
    """Causal MHA/GQA with RoPE, no q/k-norm, no bias; full causal span (see the module docstring)."""

    def __init__(self, cfg: CodecEncoderConfig) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        h = cfg.hidden_size
        self.q_proj = nn.Linear(h, self.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(h, self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(h, self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, h, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape  # [B, T, H]
        q = self.q_proj(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        rep = self.heads // self.kv_heads
        if rep > 1:  # the reference expands kv heads before SDPA
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=t > 1)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))


class EncoderMLP(nn.Module):
    def __init__(self, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(hidden, intermediate, bias=False)
        self.fc2 = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class EncoderTransformerLayer(nn.Module):
    """Pre-LayerNorm: x += scale(attn(ln(x))); x += scale(mlp(ln(x)))."""

    def __init__(self, cfg: CodecEncoderConfig) -> None:
        super().__init__()
        h = cfg.hidden_size
        self.input_layernorm = nn.LayerNorm(h, eps=cfg.norm_eps)
        self.self_attn = EncoderAttention(cfg)
        self.self_attn_layer_scale = LayerScale(h, cfg.layer_scale_initial_scale)
        self.post_attention_layernorm = nn.LayerNorm(h, eps=cfg.norm_eps)
        self.mlp = EncoderMLP(h, cfg.intermediate_size)
        self.mlp_layer_scale = LayerScale(h, cfg.layer_scale_initial_scale)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn_layer_scale(self.self_attn(self.input_layernorm(x), cos, sin))
        return x + self.mlp_layer_scale(self.mlp(self.post_attention_layernorm(x)))


class EncoderTransformer(nn.Module):
    def __init__(self, cfg: CodecEncoderConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.layers = nn.ModuleList(EncoderTransformerLayer(cfg) for _ in range(cfg.num_hidden_layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [B, T, hidden] at 25 Hz; positions 0..T-1, RoPE tables built in fp32 then cast (as the reference)."""
        cos, sin = rope_tables(torch.arange(x.shape[1], device=x.device), self.cfg.head_dim, self.cfg.rope_theta,
                               x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return x


class EncoderCodebook(nn.Module):
    """Euclidean codebook; `embed_sum / usage` is the table (`initialized` is a training flag, kept for the keys)."""

    def __init__(self, size: int, dim: int) -> None:
        super().__init__()
        self.register_buffer("initialized", torch.ones(1))
        self.register_buffer("cluster_usage", torch.ones(size))
        self.register_buffer("embed_sum", torch.zeros(size, dim))

    def table(self) -> torch.Tensor:
        return self.embed_sum / self.cluster_usage.clamp(min=1e-5)[:, None]


class _VQ(nn.Module):
    def __init__(self, size: int, dim: int) -> None:
        super().__init__()
        self.codebook = EncoderCodebook(size, dim)


class ResidualQuantizer(nn.Module):
    """Project to the codebook width, then per codebook: nearest row (L2), subtract it, go on with the residual."""

    def __init__(self, n: int, size: int, hidden: int, dim: int) -> None:
        super().__init__()
        self.input_proj = nn.Conv1d(hidden, dim, 1, bias=False)
        self.output_proj = nn.Conv1d(dim, hidden, 1, bias=False)  # decode side only; kept for the key set
        self.layers = nn.ModuleList(_VQ(size, dim) for _ in range(n))

    def forward(self, x: torch.Tensor, n: int) -> torch.Tensor:
        """x [B, hidden, T] -> the first n codes [B, n, T]."""
        residual = self.input_proj(x).transpose(1, 2)  # [B, T, D]
        b, t, d = residual.shape
        codes = []
        for vq in self.layers[:n]:
            table = vq.codebook.table()
            # The reference's exact call: cdist over all B*T rows at once in fp32, argmin per row.
            idx = torch.cdist(residual.reshape(1, b * t, d).float(), table[None].float(), p=2)[0].argmin(-1)
            idx = idx.view(b, t)
            residual = residual - F.embedding(idx, table)
            codes.append(idx)
        return torch.stack(codes, dim=1)


class SplitQuantizer(nn.Module):
    def __init__(self, cfg: CodecEncoderConfig) -> None:
        super().__init__()
        semantic, total = cfg.num_semantic_quantizers, cfg.num_quantizers
        args = (cfg.codebook_size, cfg.hidden_size, cfg.codebook_dim)
        self.semantic_residual_vector_quantizer = ResidualQuantizer(semantic, *args)
        self.acoustic_residual_vector_quantizer = ResidualQuantizer(total - semantic, *args)
        self.num_semantic = semantic

    def forward(self, x: torch.Tensor, n: int) -> torch.Tensor:
        """Both quantizers read the same embedding: semantic codes first, then n - semantic acoustic codes."""
        semantic = self.semantic_residual_vector_quantizer(x, self.num_semantic)
        acoustic = self.acoustic_residual_vector_quantizer(x, n - self.num_semantic)
        return torch.cat([semantic, acoustic], dim=1)


class CodecEncoder(nn.Module):
    """audio [B, 1, N] float in [-1, 1] at 24 kHz -> codes [B, 16, ceil(N / 1920)] (int64)."""

    def __init__(self, cfg: CodecEncoderConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.encoder = SEANetEncoder(cfg)
        self.encoder_transformer = EncoderTransformer(cfg)
        self.downsample = EncoderConv(cfg.hidden_size, cfg.hidden_size, cfg.downsample_kernel,
                                      stride=cfg.downsample_stride, bias=False, pad_mode="replicate")
        self.quantizer = SplitQuantizer(cfg)

    def forward(self, audio: torch.Tensor) -> torch.Tensor:
        x = self.encoder(audio)  # [B, hidden, T25]
        x = self.encoder_transformer(x.transpose(1, 2)).transpose(1, 2)
        return self.quantizer(self.downsample(x), self.cfg.valid_num_quantizers)

    @torch.inference_mode()
    def encode(self, audio: np.ndarray | torch.Tensor) -> torch.Tensor:
        """One utterance, mono float at 24 kHz [N] -> codes [ceil(N / 1920), 16] (int64, on the module's device)."""
        wav = torch.as_tensor(audio)
        if wav.ndim != 1 or wav.numel() == 0:
            raise ValueError(f"expected one non-empty mono waveform [N], got shape {tuple(wav.shape)}")
        p = next(self.parameters())
        codes = self(wav.to(device=p.device, dtype=p.dtype)[None, None])[0].T
        assert codes.shape[0] == math.ceil(wav.numel() / self.cfg.samples_per_frame)
        return codes


def resample(audio: np.ndarray, sr: int, target: int = 24_000) -> np.ndarray:
    """Mono float32 audio at `sr` -> `target` Hz, as the reference resamples (librosa's default: soxr HQ, then the
    length fixed to ceil(N * target / sr) by zero padding or trimming)."""
    audio = np.asarray(audio, dtype=np.float32)
    if sr == target:
        return audio
    import soxr

    out = soxr.resample(audio, sr, target, quality="HQ").astype(np.float32)
    n = math.ceil(audio.shape[0] * target / sr)
    return out[:n] if out.shape[0] >= n else np.pad(out, (0, n - out.shape[0]))

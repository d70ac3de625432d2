"""The 12 Hz speech-tokenizer decoder (codes -> 24 kHz audio), whole-utterance decode (design §9).

Every stage is causal with zero lookahead, so a whole decode of the first n frames equals the first n*1920 samples
of any longer decode. Module names mirror `speech_tokenizer/model.safetensors` under the `decoder.` prefix.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..model.config import CodecDecoderConfig
from ..model.layers import Attention, RMSNorm, SwiGLU, causal_mask, rope_tables


class CausalConv(nn.Module):
    """Conv1d with (k-1)*d zeros on the left (stride 1 everywhere in the decoder, so no right padding)."""

    def __init__(self, cin: int, cout: int, kernel: int, dilation: int = 1, groups: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv1d(cin, cout, kernel, dilation=dilation, groups=groups)
        self.left = (kernel - 1) * dilation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(F.pad(x, (self.left, 0)))


class CausalConvTranspose(nn.Module):
    """Full transposed conv, then drop the last k - s samples so output n depends on frames n//s and n//s - 1."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int) -> None:
        super().__init__()
        self.conv = nn.ConvTranspose1d(cin, cout, kernel, stride=stride)
        self.trim = kernel - stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        return y[..., : y.shape[-1] - self.trim] if self.trim else y


class SnakeBeta(nn.Module):
    """y = x + sin^2(x e^alpha) / (e^beta + 1e-9), per channel; alpha/beta stored in log space."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.zeros(channels))
        self.beta = nn.Parameter(torch.zeros(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        alpha = self.alpha.exp()[None, :, None]
        beta = self.beta.exp()[None, :, None]
        return x + (1.0 / (beta + 1e-9)) * torch.sin(x * alpha).pow(2)


class ConvNeXtBlock(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dwconv = CausalConv(dim, dim, 7, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.full((dim,), 1e-6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm(self.dwconv(x).transpose(1, 2))
        y = self.gamma * self.pwconv2(F.gelu(self.pwconv1(y)))
        return x + y.transpose(1, 2)


class ResidualUnit(nn.Module):
    def __init__(self, dim: int, dilation: int) -> None:
        super().__init__()
        self.act1 = SnakeBeta(dim)
        self.conv1 = CausalConv(dim, dim, 7, dilation=dilation)
        self.act2 = SnakeBeta(dim)
        self.conv2 = CausalConv(dim, dim, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv2(self.act2(self.conv1(self.act1(x))))


class DecoderBlock(nn.Module):
    """SnakeBeta -> causal ConvTranspose (k = 2s) -> residual units with dilation 1, 3, 9 (`block.0..4`)."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.block = nn.ModuleList(
            [SnakeBeta(cin), CausalConvTranspose(cin, cout, 2 * stride, stride),
             *(ResidualUnit(cout, d) for d in (1, 3, 9))]
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for m in self.block:
            x = m(x)
        return x


class Codebook(nn.Module):
    def __init__(self, size: int, dim: int) -> None:
        super().__init__()
        self.embedding_sum = nn.Parameter(torch.zeros(size, dim))
        self.cluster_usage = nn.Parameter(torch.ones(size))

    def table(self) -> torch.Tensor:
        return self.embedding_sum / self.cluster_usage.clamp(min=1e-5)[:, None]


class _VQLayer(nn.Module):
    def __init__(self, size: int, dim: int) -> None:
        super().__init__()
        self._codebook = Codebook(size, dim)


class _VQ(nn.Module):
    def __init__(self, n: int, size: int, dim: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(_VQLayer(size, dim) for _ in range(n))


class RVQGroup(nn.Module):
    """`rvq_first` / `rvq_rest`: sum of codebook rows, then a 1x1 conv to codebook_dim. input_proj is unused."""

    def __init__(self, n: int, size: int, codebook_dim: int) -> None:
        super().__init__()
        inner = codebook_dim // 2
        self.input_proj = nn.Conv1d(codebook_dim, inner, 1, bias=False)  # encode side only; kept for the key set
        self.output_proj = nn.Conv1d(inner, codebook_dim, 1, bias=False)
        self.vq = _VQ(n, size, inner)

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        """codes [B, n, T] -> [B, codebook_dim, T]."""
        total = sum(F.embedding(codes[:, i], layer._codebook.table()) for i, layer in enumerate(self.vq.layers))
        return self.output_proj(torch.as_tensor(total).transpose(1, 2))


class Quantizer(nn.Module):
    def __init__(self, cfg: CodecDecoderConfig) -> None:
        super().__init__()
        self.rvq_first = RVQGroup(1, cfg.codebook_size, cfg.codebook_dim)
        self.rvq_rest = RVQGroup(cfg.num_quantizers - 1, cfg.codebook_size, cfg.codebook_dim)

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        return self.rvq_first(codes[:, :1]) + self.rvq_rest(codes[:, 1:])


class LayerScale(nn.Module):
    def __init__(self, dim: int, init: float) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.full((dim,), init))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * x


class CodecTransformerLayer(nn.Module):
    def __init__(self, cfg: CodecDecoderConfig) -> None:
        super().__init__()
        h = cfg.hidden_size
        self.input_layernorm = RMSNorm(h, cfg.rms_norm_eps)
        self.self_attn = Attention(h, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim,
                                   cfg.rms_norm_eps, qk_norm=False)
        self.self_attn_layer_scale = LayerScale(h, cfg.layer_scale_initial_scale)
        self.post_attention_layernorm = RMSNorm(h, cfg.rms_norm_eps)
        self.mlp = SwiGLU(h, cfg.intermediate_size)
        self.mlp_layer_scale = LayerScale(h, cfg.layer_scale_initial_scale)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        x = x + self.self_attn_layer_scale(self.self_attn(self.input_layernorm(x), cos, sin, mask))
        return x + self.mlp_layer_scale(self.mlp(self.post_attention_layernorm(x)))


class CodecTransformer(nn.Module):
    def __init__(self, cfg: CodecDecoderConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.input_proj = nn.Linear(cfg.latent_dim, cfg.hidden_size)
        self.layers = nn.ModuleList(CodecTransformerLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.output_proj = nn.Linear(cfg.hidden_size, cfg.latent_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [B, T, latent] -> [B, T, latent]; causal attention over a window of `sliding_window` frames."""
        x = self.input_proj(x)
        t = x.shape[1]
        cos, sin = rope_tables(torch.arange(t, device=x.device), self.cfg.head_dim, self.cfg.rope_theta, x.dtype)
        mask = causal_mask(t, t, x.device, window=self.cfg.sliding_window)
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        return self.output_proj(self.norm(x))


class CodecDecoder(nn.Module):
    """codes [B, 16, T] (int64, >= 0) -> audio [B, 1, T * 1920] in [-1, 1]."""

    def __init__(self, cfg: CodecDecoderConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.quantizer = Quantizer(cfg)
        self.pre_conv = CausalConv(cfg.codebook_dim, cfg.latent_dim, 3)
        self.pre_transformer = CodecTransformer(cfg)
        self.upsample = nn.ModuleList(
            nn.ModuleList([CausalConvTranspose(cfg.latent_dim, cfg.latent_dim, r, r), ConvNeXtBlock(cfg.latent_dim)])
            for r in cfg.upsampling_ratios
        )
        dims = [cfg.decoder_dim // 2**i for i in range(len(cfg.upsample_rates) + 1)]
        self.decoder = nn.ModuleList(
            [CausalConv(cfg.latent_dim, cfg.decoder_dim, 7),
             *(DecoderBlock(dims[i], dims[i + 1], r) for i, r in enumerate(cfg.upsample_rates)),
             SnakeBeta(dims[-1]), CausalConv(dims[-1], 1, 7)]
        )

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        if codes.shape[1] != self.cfg.num_quantizers:
            raise ValueError(f"expected {self.cfg.num_quantizers} codebooks, got {codes.shape[1]}")
        x = self.pre_conv(self.quantizer(codes))
        x = self.pre_transformer(x.transpose(1, 2)).transpose(1, 2)
        for pair in self.upsample:
            for m in pair:
                x = m(x)
        for m in self.decoder:
            x = m(x)
        return x.clamp(-1.0, 1.0)

    @torch.inference_mode()
    def decode(self, frames: torch.Tensor) -> torch.Tensor:
        """frames [T, 16] codes of one utterance -> float audio [T * 1920] (whole-utterance decode)."""
        p = next(self.parameters())
        codes = frames.clamp(min=0).T[None].to(device=p.device, dtype=torch.long)
        return self(codes)[0, 0].float()

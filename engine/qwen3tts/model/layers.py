"""Qwen3-style transformer pieces shared by the Talker, the code predictor and the codec's pre-transformer.

Parameter names mirror the official checkpoint keys (`self_attn.q_proj`, `mlp.gate_proj`, ...), so a module's
`state_dict()` is the checkpoint layout with no renaming table.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .config import DecoderLayersConfig


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Reduce in fp32, cast back, then scale: the reference's rounding order (matters for bf16 parity).
        # The dtype checks only skip no-op casts (eager dispatch cost), never change a value.
        xf = x if x.dtype == torch.float32 else x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * (xf if x.dtype == torch.float32 else xf.to(x.dtype))


def rope_inv_freq(head_dim: int, theta: float, device: torch.device) -> torch.Tensor:
    """RoPE's frequencies [head_dim / 2] in fp32, as the reference computes them."""
    return 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64, device=device).float() / head_dim))


def rope_tables(positions: torch.Tensor, head_dim: int, theta: float, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """cos/sin [T, head_dim] for rotate-half RoPE, built in fp32 then cast, exactly as the reference builds them."""
    inv_freq = rope_inv_freq(head_dim, theta, positions.device)
    freqs = positions.float()[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # x [B, heads, T, D]; cos/sin [T, D]
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class KVCache:
    """Preallocated per-layer K/V buffers [B, kv_heads, capacity, D] that grow by doubling (eager, batch-static)."""

    def __init__(self, num_layers: int, batch: int, kv_heads: int, head_dim: int, capacity: int,
                 dtype: torch.dtype, device: torch.device) -> None:
        shape = (batch, kv_heads, capacity, head_dim)
        self.k = [torch.empty(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.v = [torch.empty(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.length = 0  # positions filled (same for every layer once a forward completes)

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        start, end = self.length, self.length + k.shape[2]
        if end > self.k[layer].shape[2]:
            grow = max(end, 2 * self.k[layer].shape[2])
            for buf in (self.k, self.v):
                old = buf[layer]
                new = old.new_empty((*old.shape[:2], grow, old.shape[3]))
                new[:, :, :start] = old[:, :, :start]
                buf[layer] = new
        self.k[layer][:, :, start:end] = k
        self.v[layer][:, :, start:end] = v
        return self.k[layer][:, :, :end], self.v[layer][:, :, :end]


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """q [B, Hq, Tq, D], k/v [B, Hkv, Tk, D]; GQA (query head h reads kv head h // rep); mask: bool [Tq, Tk]."""
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=q.shape[1] != k.shape[1])


def causal_mask(tq: int, tk: int, device: torch.device, window: int | None = None) -> torch.Tensor | None:
    """Bool [tq, tk] for queries at the last tq of tk positions; window counts self (72 = self + 71 past)."""
    if tq == 1 and (window is None or tk <= window):
        return None  # one new query sees the whole (short enough) cache
    qpos = torch.arange(tk - tq, tk, device=device)[:, None]
    kpos = torch.arange(tk, device=device)[None, :]
    mask = kpos <= qpos
    if window is not None:
        mask &= qpos - kpos < window
    return mask


class Attention(nn.Module):
    def __init__(self, hidden: int, heads: int, kv_heads: int, head_dim: int, eps: float, qk_norm: bool) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.q_proj = nn.Linear(hidden, heads * head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, kv_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, kv_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(heads * head_dim, hidden, bias=False)
        # Qwen3 q/k-norm over head_dim before RoPE; the codec transformer has none.
        self.q_norm = RMSNorm(head_dim, eps) if qk_norm else None
        self.k_norm = RMSNorm(head_dim, eps) if qk_norm else None

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor | None,
                cache: KVCache | None = None, layer: int = 0) -> torch.Tensor:
        b, t, _ = x.shape  # [B, T, H]
        q = self.q_proj(x).view(b, t, self.heads, self.head_dim)
        k = self.k_proj(x).view(b, t, self.kv_heads, self.head_dim)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q = apply_rope(q.transpose(1, 2), cos, sin)
        k = apply_rope(k.transpose(1, 2), cos, sin)
        if cache is not None:
            k, v = cache.append(layer, k, v)
        out = attention(q, k, v, mask)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))


class SwiGLU(nn.Module):
    def __init__(self, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    """Pre-norm Qwen3 layer: x += attn(norm(x)); x += mlp(norm(x))."""

    def __init__(self, hidden: int, intermediate: int, heads: int, kv_heads: int, head_dim: int, eps: float) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(hidden, eps)
        self.self_attn = Attention(hidden, heads, kv_heads, head_dim, eps, qk_norm=True)
        self.post_attention_layernorm = RMSNorm(hidden, eps)
        self.mlp = SwiGLU(hidden, intermediate)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor | None,
                cache: KVCache | None, layer: int) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask, cache, layer)
        return x + self.mlp(self.post_attention_layernorm(x))


class DecoderStack(nn.Module):
    """`model.*` of the Talker or the code predictor: layers + final norm, fed with inputs_embeds only."""

    def __init__(self, cfg: DecoderLayersConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.layers = nn.ModuleList(
            DecoderLayer(cfg.hidden_size, cfg.intermediate_size, cfg.num_attention_heads, cfg.num_key_value_heads,
                         cfg.head_dim, cfg.rms_norm_eps)
            for _ in range(cfg.num_hidden_layers)
        )
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self._rope: tuple[torch.Tensor, torch.Tensor] | None = None  # cos/sin for positions 0..len-1

    def rope(self, start: int, end: int, device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
        """Rows start..end-1 of cached tables (elementwise, so slicing equals computing them per call)."""
        cached = self._rope
        if cached is None or cached[0].shape[0] < end or cached[0].device != device or cached[0].dtype != dtype:
            size = max(end, 2 * cached[0].shape[0] if cached is not None else 256)
            cached = rope_tables(torch.arange(size, device=device), self.cfg.head_dim, self.cfg.rope_theta, dtype)
            self._rope = (cached[0], cached[1])
        return cached[0][start:end], cached[1][start:end]

    def new_cache(self, batch: int, capacity: int, dtype: torch.dtype, device: torch.device) -> KVCache:
        c = self.cfg
        return KVCache(c.num_hidden_layers, batch, c.num_key_value_heads, c.head_dim, capacity, dtype, device)

    def forward(self, x: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """x [B, T, H] appended after the cache's positions; returns post-norm hidden [B, T, H]."""
        t, past = x.shape[1], cache.length
        # Positions are 0-based and contiguous per stream, so MRoPE with three equal streams is plain RoPE.
        cos, sin = self.rope(past, past + t, x.device, x.dtype)
        mask = causal_mask(t, past + t, x.device)
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, mask, cache, i)
        cache.length += t
        return self.norm(x)

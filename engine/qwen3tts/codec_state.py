"""The incremental codec's per-slot state layout, and the per-row tail gather that advances it (codec_stream.py).

Kept apart from the step itself so codec_stream.py stays readable; nothing here runs a module.
"""

from __future__ import annotations

import functools

import torch

from ..slot_pool import SlotSpec
from .codec import CodecDecoder


@functools.cache
def _arange(n: int, device: torch.device) -> torch.Tensor:
    """A shared constant 0..n-1 (one launch fewer per use inside a step; stable address for graph replay)."""
    return torch.arange(n, device=device)


def _tail(full: torch.Tensor, end: torch.Tensor, size: int, dim: int, out: torch.Tensor | None = None,
          ) -> torch.Tensor:
    """full[b, ..., end[b] : end[b] + size, ...] along dim, per row (the last `size` real items before padding).

    out: write there (e.g. the slot's state view in the step's gathered rows) instead of a new tensor.
    """
    idx = end[:, None] + _arange(size, full.device)  # [B, size]
    shape = [full.shape[0]] + [1] * (full.dim() - 1)
    shape[dim] = size
    idx = idx.view(shape).expand(*[s if i != dim else size for i, s in enumerate(full.shape)])
    return torch.gather(full, dim, idx) if out is None else torch.gather(full, dim, idx, out=out)


def state_layout(codec: CodecDecoder, dtype: torch.dtype) -> dict[str, SlotSpec]:
    """Name -> per-slot tensor of the streaming state (see codec_stream's module docstring)."""
    cfg = codec.cfg
    window = cfg.sliding_window - 1
    layout = {
        "frames": SlotSpec((1,), torch.int64),
        "pre_conv": SlotSpec((cfg.codebook_dim, codec.pre_conv.left), dtype),
        "kv": SlotSpec((cfg.num_hidden_layers, 2, cfg.num_key_value_heads, window, cfg.head_dim), dtype),
    }
    for i, (convt, block) in enumerate(codec.upsample):
        if convt.trim:
            raise ValueError("upsample transposed convs with overlap are not supported (kernel must equal stride)")
        layout[f"upsample.{i}.dwconv"] = SlotSpec((cfg.latent_dim, block.dwconv.left), dtype)
    layout["decoder.0"] = SlotSpec((cfg.latent_dim, codec.decoder[0].left), dtype)
    for b in range(1, len(codec.decoder) - 2):
        convt, *units = list(codec.decoder[b].block)[1:]
        if convt.trim != convt.conv.stride[0]:
            raise ValueError("decoder transposed convs must have kernel = 2 * stride")
        layout[f"decoder.{b}.convt"] = SlotSpec((convt.conv.in_channels, 1), dtype)
        for j, ru in enumerate(units):
            layout[f"decoder.{b}.ru{j}"] = SlotSpec((ru.conv1.conv.in_channels, ru.conv1.left), dtype)
    last = codec.decoder[-1]
    layout[f"decoder.{len(codec.decoder) - 1}"] = SlotSpec((last.conv.in_channels, last.left), dtype)
    return layout


def state_values(layout: dict[str, SlotSpec]) -> int:
    """Values of streaming state per stream (the frame counter excluded)."""
    return sum(s.nbytes // torch.empty((), dtype=s.dtype).element_size() for n, s in layout.items() if n != "frames")

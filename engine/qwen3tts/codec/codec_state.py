"""What every incremental codec shares: the per-slot state layout, and the slot interface around a step.

The state a stream carries (design §9; docs/codec.md has the table): each stateful causal conv's last inputs, each
causal transposed conv's last input frame, the transformer's last 71 keys and values per layer, and the frame
count. `state_layout` names them for a SlotPool; `StreamingCodec` is the base of the two steps that use it
(codec_stream.CodecStream, the plain PyTorch reference; codec_fused.FusedCodecStream, the Triton step).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch

from ...slot_pool import SlotPool, SlotSpec
from ..model.config import CodecDecoderConfig
from .codec import CodecDecoder


@functools.cache
def shared_arange(n: int, device: torch.device) -> torch.Tensor:
    """A shared constant 0..n-1 (one launch fewer per use inside a step; stable address for graph replay)."""
    return torch.arange(n, device=device)


def state_layout(codec: CodecDecoder, dtype: torch.dtype) -> dict[str, SlotSpec]:
    """Name -> per-slot tensor of the streaming state, channels first (codec_fused transposes it)."""
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


class StreamingCodec:
    """Streams of one codec decoder, their state in `pool` (slot 0 the sink for padding rows).

    A subclass sets pool, layout, device, cfg and samples_per_frame, and implements `step`:
    slots [B] long, codes [B, T, Q] long, num_frames [B] long -> float32 audio [B, T * samples_per_frame], row b's
    first num_frames[b] * samples_per_frame samples real; no host sync, so a step can be captured per (B, T).
    """

    pool: SlotPool
    layout: dict[str, SlotSpec]
    device: torch.device
    cfg: CodecDecoderConfig
    samples_per_frame: int
    max_step_frames: int | None = None  # widest step the implementation takes (None: any)

    def step(self, slots: torch.Tensor, codes: torch.Tensor, num_frames: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    # -- slots ------------------------------------------------------------------------------------------------
    def open(self) -> int:
        """A fresh slot for a new stream (PoolFull if none: check pool.can_allocate() first)."""
        return self.pool.allocate()

    def close(self, slot: int) -> None:
        """Release a stream's slot on end or cancel."""
        self.pool.free(slot)

    def state_values(self) -> int:
        return state_values(self.layout)

    def warm(self, slots: torch.Tensor, codes: torch.Tensor, num_frames: torch.Tensor) -> None:
        """In-context cloning: run the reference codes through the state and discard their audio (in steps of at
        most max_step_frames: a long reference is several steps, which streaming makes exact)."""
        width = self.max_step_frames or codes.shape[1]
        for start in range(0, codes.shape[1], width):
            chunk = codes[:, start: start + width]
            self.step(slots, chunk, (num_frames - start).clamp(0, chunk.shape[1]))

    # -- convenience (eager, host-side: tests, the benchmark) ------------------------------------------------------
    def decode_chunks(self, frames: torch.Tensor, schedule: Sequence[int], ref_codes: torch.Tensor | None = None,
                      ) -> torch.Tensor:
        """One stream, alone: frames [N, Q] in chunks of the schedule's widths (the last repeats) -> float [N*spf].

        Opens a slot, optionally warms it with ref_codes [R, Q], and frees it at the end.
        """
        slot = self.open()
        try:
            slots = torch.tensor([slot], device=self.device)
            if ref_codes is not None:
                r = ref_codes.shape[0]
                self.warm(slots, ref_codes[None].to(self.device), torch.tensor([r], device=self.device))
            out, start, k = [], 0, 0
            while start < frames.shape[0]:
                w = min(schedule[min(k, len(schedule) - 1)], frames.shape[0] - start)
                chunk = frames[None, start: start + w].to(self.device)
                out.append(self.step(slots, chunk, torch.tensor([w], device=self.device))[0])
                start, k = start + w, k + 1
            return torch.cat(out) if out else torch.zeros(0, device=self.device)
        finally:
            self.close(slot)

"""The codec step captured for a fixed set of (rows, frames) buckets, built once at start-up.

A serving loop calls the codec with whatever rows are ready, each with its own number of new frames. Replaying a
captured CUDA graph needs fixed shapes, so the runner keeps static input buffers per bucket and pads a call up to
the smallest bucket that holds it (padding rows on the pool's sink slot with 0 frames, padding frames after each
row's own). The capture itself is engine/graphs.py's GraphSet, shared with the decode step: largest bucket first,
one memory pool, an eager warm-up before each capture (on sink rows only, so live streams are untouched). Building
a bucket is when the fused path's Triton kernels compile and tune their tiles (about 100 s for the first bucket on
the H200, much less for the rest): GraphSet's progress bar says so instead of a silent wait.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from voxgate.engine.graphs import GraphSet
from voxgate.engine.qwen3tts.codec.codec_state import StreamingCodec

DEFAULT_BUCKETS = ((1, 4), (8, 4), (32, 4), (128, 1), (8, 16), (32, 16), (128, 4))
Bucket = tuple[int, int]  # (rows, frames)


@dataclass
class _StaticInputs:
    """One bucket's step inputs, at fixed addresses (a graph replays reads of these very tensors)."""

    slots: torch.Tensor  # [rows] long
    codes: torch.Tensor  # [rows, frames, Q] long
    num_frames: torch.Tensor  # [rows] long


class CodecRunner:
    """Call like `StreamingCodec.step`; each call replays the captured step of the smallest bucket that fits.

    The returned audio is a view of a graph's static output, which the next call of any bucket (they share a
    memory pool) may overwrite: use or copy it first. enforce_eager (and any non-CUDA device): same buckets and
    padding, the step run eagerly.
    """

    def __init__(self, stream: StreamingCodec, buckets: Sequence[Bucket] = DEFAULT_BUCKETS, progress: bool = True,
                 enforce_eager: bool = False) -> None:
        usable = stream.pool.max_streams
        bad = [b for b in buckets if b[0] > usable or b[0] < 1 or b[1] < 1]
        if bad:
            raise ValueError(f"buckets {bad} do not fit: rows must be 1..{usable} (the pool's usable slots) "
                             "and frames at least 1")
        self.stream = stream
        self.inputs: dict[Bucket, _StaticInputs] = {}
        self.graphs: GraphSet[Bucket] = GraphSet(stream.device, enforce_eager=enforce_eager)
        self.graphs.capture(buckets, self._make_step, size=lambda b: b[0] * b[1],
                            desc="codec buckets (compile, tune, capture)", progress=progress)
        # Cheapest first: the first bucket that holds a call is the one with the least padded work.
        self.buckets = sorted(self.graphs.keys(), key=lambda b: (b[0] * b[1], b))

    def _make_step(self, bucket: Bucket) -> Callable[[], torch.Tensor]:
        rows, frames = bucket
        dev, q = self.stream.device, self.stream.cfg.num_quantizers
        inp = self.inputs[bucket] = _StaticInputs(
            torch.zeros(rows, dtype=torch.long, device=dev),  # the sink slot: warm-up and capture touch no stream
            torch.zeros(rows, frames, q, dtype=torch.long, device=dev),
            torch.zeros(rows, dtype=torch.long, device=dev),
        )
        return lambda: self.stream.step(inp.slots, inp.codes, inp.num_frames)

    def bucket_for(self, rows: int, frames: int) -> Bucket:
        """The smallest bucket with at least `rows` rows and `frames` frames (ValueError if none)."""
        for b in self.buckets:
            if b[0] >= rows and b[1] >= frames:
                return b
        raise ValueError(f"no codec bucket holds {rows} rows x {frames} frames (buckets: {self.buckets}); "
                         "split the call or add a bucket")

    def __call__(self, slots: torch.Tensor, codes: torch.Tensor, num_frames: torch.Tensor) -> torch.Tensor:
        """slots [B], codes [B, T, Q], num_frames [B] -> float audio [B, T * samples_per_frame] (see class doc)."""
        n, t = codes.shape[:2]
        bucket = self.bucket_for(n, t)
        inp = self.inputs[bucket]
        inp.slots[:n].copy_(slots)
        inp.slots[n:] = 0  # padding rows: the sink, 0 frames
        inp.codes[:n, :t].copy_(codes)
        inp.num_frames[:n].copy_(num_frames)
        inp.num_frames[n:] = 0
        audio = self.graphs(bucket)
        return audio[:n, : t * self.stream.samples_per_frame]

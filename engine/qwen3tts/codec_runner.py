"""Captured codec steps for a fixed set of (rows, frames) buckets, built once at start-up.

A serving loop calls the codec with whatever rows are ready, each with its own number of new frames. Replaying a
captured CUDA graph needs fixed shapes, so the runner holds one `CapturedStep` per bucket and pads a call up to
the smallest bucket that holds it (padding rows on the pool's sink slot, padding frames after each row's own).
Building a bucket runs the step eagerly first, which is when the fused path's Triton kernels compile and tune
their tiles (about 100 s for the first bucket on the H200, much less for the rest), then captures it: a
progress bar says so instead of a silent wait. The graphs share one memory pool, captured largest first so the
smaller ones fit in its blocks.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .codec_stream import CapturedStep, StreamingCodec

DEFAULT_BUCKETS = ((1, 4), (8, 4), (32, 4), (128, 1), (8, 16), (32, 16), (128, 4))


class CodecRunner:
    """Call like `StreamingCodec.step`; each call replays the captured step of the smallest bucket that fits.

    The returned audio is a view of a graph's static output, which the next call of any bucket (they share a
    memory pool) may overwrite: use or copy it first. enforce_eager: same buckets and padding, no graphs (CPU).
    """

    def __init__(self, stream: StreamingCodec, buckets: Sequence[tuple[int, int]] = DEFAULT_BUCKETS,
                 progress: bool = True, enforce_eager: bool = False) -> None:
        usable = stream.pool.max_streams
        too_wide = [b for b in buckets if b[0] > usable or b[0] < 1 or b[1] < 1]
        if too_wide:
            raise ValueError(f"buckets {too_wide} do not fit: rows must be 1..{usable} (the pool's usable slots) "
                             "and frames at least 1")
        self.stream = stream
        graphs = stream.device.type == "cuda" and not enforce_eager
        pool = torch.cuda.graph_pool_handle() if graphs else None
        self.steps: dict[tuple[int, int], CapturedStep] = {}
        order = sorted(set(buckets), key=lambda b: (b[0] * b[1], b), reverse=True)
        from tqdm import tqdm

        bar = tqdm(order, desc="codec buckets (compile, tune, capture)", unit="bucket", disable=not progress)
        for rows, frames in bar:
            bar.set_postfix_str(f"{rows} rows x {frames} frames")
            self.steps[(rows, frames)] = CapturedStep(stream, rows, frames, mempool=pool, enforce_eager=not graphs)
        # Cheapest first: the first bucket that holds a call is the one with the least padded work.
        self.buckets = sorted(self.steps, key=lambda b: (b[0] * b[1], b))

    def bucket_for(self, rows: int, frames: int) -> tuple[int, int]:
        """The smallest bucket with at least `rows` rows and `frames` frames (ValueError if none)."""
        for b in self.buckets:
            if b[0] >= rows and b[1] >= frames:
                return b
        raise ValueError(f"no codec bucket holds {rows} rows x {frames} frames (buckets: {self.buckets}); "
                         "split the call or add a bucket")

    def __call__(self, slots: torch.Tensor, codes: torch.Tensor, num_frames: torch.Tensor) -> torch.Tensor:
        """slots [B], codes [B, T, Q], num_frames [B] -> float audio [B, T * samples_per_frame] (see class doc)."""
        return self.steps[self.bucket_for(codes.shape[0], codes.shape[1])](slots, codes, num_frames)

"""The aligner's audio encoder (batch.encode_batch) replayed from CUDA graphs: one per chunk bucket for the convs,
one per (rows, row width) bucket for the transformer.

Eager, a call is the convs and ~12 launches a layer issued from the aligner's thread; captured, it is two replays
and a few copies. A graph replays fixed shapes and cannot sync with the host, so the boolean selections of
encode_batch become index tensors built on the host from `frames` alone and copied into static buffers:

- **Convs** (key `("convs", C)`): a call's n <= C chunks are gathered into the first rows of one [C, 1, mels, 100]
  buffer, each with the mel frames it keeps through the convs (batch.conv_chunks, as eager); the rest keep none.
  The graph writes every chunk's 13 frames, positions added, into a frame table of [largest bucket x 13 + 1,
  d_model] whose last row is never written: it stays zero.
- **Layers** (key `("layers", W, S)`): the call's attention windows packed into W rows of S slots as encode_batch
  packs them (windows.py: first fit, largest first; S the smallest row bucket that holds the longest window).
  Slot j of row w reads the table at src[w, j], its frame or the zero row, under a [S, S] mask per row that lets
  a frame see its own window's frames only: every real frame attends to exactly the keys it has alone; the mask
  makes the packing exact, the zero row keeps padding finite. Padding slots and rows past the call's see only
  themselves (a slot with no key would be NaN) and are never read. ln_post and the projections run on every slot;
  the real ones are then taken by index.

Buckets: chunks from 1 to `max_chunks` (256 by default, the engine option `aligner_graph_chunks`: 256 s of audio,
about 130 of the loop's 0.5-3.5-s sentences), 4 to an octave (1 ... 8, 10, 12, 14, 16, 20 ...; the engine option
`aligner_graph_steps`; engine/graphs.py bucket_ladder), so a call pads its chunks by at most a quarter; rows W of 1,
2, 3, 4, 6, 8, 12 ... up to as many, and row widths S of 13 x 1, 2, 4 ... chunks up to a full window (13 x
chunks_per_window): for 256, 28 conv graphs and 64 layers graphs for the official aligner (S = 13, 26, 52, 104). A
call with more chunks or more windows runs encode_batch eagerly (the same result). Memory, for the official aligner
in bf16, all graphs in one pool: the buffers, the layers graphs' outputs (one [W x S, 1024] each) and the largest
graph's activations, the 256-chunk convs' (the first conv's [256, 480, 64, 50] output, ~0.8 GB, and its patches).
Estimated from the shapes, not measured.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..graphs import GraphSet, bucket_ladder, smallest_bucket, to_device, upload
from .audio_encoder import AudioEncoder, conv_frames, sinusoids
from .batch import chunk_lengths, chunk_limits, conv_chunks, encode_batch, head, window_lengths
from .config import CHUNK_FRAMES
from .decoder_graphs import GRAPH_STEPS
from .windows import WindowLayout

MAX_CHUNKS = 256  # the largest chunk and window bucket (engine option aligner_graph_chunks)
FRAMES = conv_frames(CHUNK_FRAMES)  # encoder frames of a full chunk: 13


def row_counts(most: int) -> tuple[int, ...]:
    """Packed rows W: 1, 2, 3, 4, 6, 8, 12 ... up to `most` (a power of two), so a call pads at most half a step."""
    return bucket_ladder(most, 2)


def row_buckets(chunks_per_window: int) -> tuple[int, ...]:
    """Window rows S: 13 x 1, 2, 4 ... chunks below a full window, then the full window."""
    counts = [c for c in (1 << i for i in range(chunks_per_window.bit_length())) if c < chunks_per_window]
    return tuple(FRAMES * c for c in [*counts, chunks_per_window])


class CapturedEncoder:
    def __init__(self, tower: AudioEncoder, device: torch.device, dtype: torch.dtype,
                 max_chunks: int = MAX_CHUNKS, chunk_buckets: tuple[int, ...] | None = None,
                 window_buckets: tuple[int, ...] | None = None, rows: tuple[int, ...] | None = None,
                 steps: int = GRAPH_STEPS) -> None:
        cfg = tower.cfg
        self.tower = tower
        self.share = True  # windows share rows (windows.py); False: a window a row, only to measure against
        # Windows are never more than chunks, and packed rows never more than windows: both ladders end at
        # max_chunks (chunks `steps` to an octave, 1, 2, 3, 4, 5, 6, 7, 8, 10 ... for 4; rows 1, 2, 3, 4, 6, 8 ...)
        # unless given.
        self.chunk_buckets = tuple(sorted(chunk_buckets or bucket_ladder(max_chunks, steps)))
        self.window_buckets = tuple(sorted(window_buckets or row_counts(max_chunks)))
        self.rows = tuple(sorted(rows or row_buckets(cfg.chunks_per_window)))
        most_chunks, most_rows = self.chunk_buckets[-1], self.window_buckets[-1] * self.rows[-1]
        self.chunks = torch.zeros((most_chunks, 1, cfg.num_mel_bins, CHUNK_FRAMES), dtype=dtype, device=device)
        self.limit = torch.zeros(most_chunks, dtype=torch.int64, device=device)
        self.table = torch.zeros((most_chunks * FRAMES + 1, cfg.d_model), dtype=dtype, device=device)
        self.zero_row = most_chunks * FRAMES
        self.src = torch.full((most_rows,), self.zero_row, dtype=torch.int64, device=device)
        # each slot's keys ([W, S, S] of a bucket, flat); all true for the warm-ups: no slot all masked
        self.mask = torch.ones(most_rows * self.rows[-1], dtype=torch.bool, device=device)
        self.positions = sinusoids(FRAMES, cfg.d_model).to(device, dtype)
        self.graphs: GraphSet[tuple[str, int] | tuple[str, int, int]] = GraphSet(device)

    def capture(self, progress: bool = True) -> None:
        keys = [("convs", c) for c in self.chunk_buckets]
        keys += [("layers", w, s) for w in self.window_buckets for s in self.rows]
        self.graphs.capture(keys, self._make, size=self._activations, desc="aligner encoder graphs",
                            progress=progress)

    def _activations(self, key: tuple[str, int] | tuple[str, int, int]) -> int:
        """A graph's largest activation, in elements (largest first: the smaller ones reuse its memory)."""
        cfg = self.tower.cfg
        if key[0] == "convs":  # the first conv's output
            return key[1] * cfg.downsample_hidden_size * ((cfg.num_mel_bins + 1) // 2) * (CHUNK_FRAMES // 2)
        return key[1] * key[2] * cfg.encoder_ffn_dim  # fc1's output

    def _make(self, key):  # type: ignore[no-untyped-def]
        if key[0] == "convs":
            c = key[1]
            chunks, limit, table = self.chunks[:c], self.limit[:c], self.table[: c * FRAMES].view(c, FRAMES, -1)

            @torch.inference_mode()
            def convs() -> None:
                table.copy_(conv_chunks(self.tower, chunks, limit, self.positions))

            return convs
        _, w, s = key
        src, mask = self.src[: w * s], self.mask[: w * s * s].view(w, s, s)

        @torch.inference_mode()
        def layers() -> torch.Tensor:
            h = self.table.index_select(0, src).view(w, s, -1)
            for layer in self.tower.layers:
                h = layer(h, mask)
            return head(self.tower, h.reshape(w * s, -1))

        return layers

    def fits(self, frames: list[int]) -> bool:
        windows = window_lengths(self.tower, frames)
        chunks = sum(len(chunk_lengths(t)) for t in frames)
        return chunks <= self.chunk_buckets[-1] and len(windows) <= self.window_buckets[-1] and \
            max(windows) <= self.rows[-1]

    def __call__(self, mel: torch.Tensor, frames: list[int]) -> torch.Tensor:
        """encode_batch(tower, mel, frames): [sum of encoder_frames, output_dim], from the graphs where it fits."""
        if not self.fits(frames):
            return encode_batch(self.tower, mel, frames, self.share)
        chunks, table_rows = self._load_chunks(mel, frames)
        windows, rows = self._load_windows(frames, table_rows)
        self.graphs(("convs", chunks))
        out = self.graphs(("layers", *windows))
        return out.index_select(0, rows)

    def _load_chunks(self, mel: torch.Tensor, frames: list[int]) -> tuple[int, list[int]]:
        """Every clip's chunks and what they keep into the buffers -> (the chunk bucket, the table rows of every
        encoder frame of the call, in order)."""
        lengths = [chunk_lengths(t) for t in frames]
        flat = [m for clip in lengths for m in clip]
        n = len(flat)
        bucket = smallest_bucket(self.chunk_buckets, n)
        # Chunk j of clip b is row b * per_clip + j of the mel cut into chunks.
        per_clip = -(-mel.shape[2] // CHUNK_FRAMES)
        ids = to_device(torch.tensor([b * per_clip + j for b, clip in enumerate(lengths) for j in range(len(clip))]),
                        self.table.device)
        limit = torch.zeros(bucket, dtype=torch.int64)  # padding chunks (whatever an earlier call left) keep none
        limit[:n] = torch.tensor(chunk_limits(frames))
        mel = F.pad(mel, (0, per_clip * CHUNK_FRAMES - mel.shape[2]))
        cut = mel.view(mel.shape[0], mel.shape[1], per_clip, CHUNK_FRAMES).transpose(1, 2).flatten(0, 1)
        self.chunks[:n, 0].copy_(cut.index_select(0, ids))
        upload(self.limit[:bucket], limit)
        # The g-th chunk's frames are rows g * 13 + t of the table, t below what it keeps.
        return bucket, [g * FRAMES + t for g, m in enumerate(flat) for t in range(conv_frames(m))]

    def _load_windows(self, frames: list[int], table_rows: list[int]) -> tuple[tuple[int, int], torch.Tensor]:
        """Every attention window packed into rows of S slots (windows.py) and their masks into the buffers ->
        ((W, S) bucket, the real rows of the layers graph's output, in frame order)."""
        windows = window_lengths(self.tower, frames)
        s = smallest_bucket(self.rows, max(windows))
        layout = WindowLayout.build(windows, s, share=self.share)
        w = smallest_bucket(self.window_buckets, layout.rows)
        layout = layout.padded(w)  # rows past the call's: padding, never read
        upload(self.src[: w * s], layout.sources(torch.tensor(table_rows), zero=self.zero_row))
        upload(self.mask[: w * s * s], layout.mask().view(-1))
        return (w, s), to_device(torch.tensor(layout.slot_of_frame), self.table.device)

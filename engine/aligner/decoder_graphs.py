"""The aligner's packed decoder (batch.hidden_packed) replayed from CUDA graphs, one per token-count bucket.

Eager, the packed decoder is ~9 launches a layer issued from the aligner's Python thread, which also competes for the
GIL with the engine loop's worker and the event loop. Captured, a call is one replay. Each bucket holds N tokens; a
call of n <= N real tokens copies them into the bucket's input buffers and pads the rest with zero rows in a sink
slot at position 0, which only padding writes and reads (a padded row's output is never read). The keys and values
live in one store shared by every bucket, [layers, 2, clips + 1, kv heads, positions, head dim]: a real token writes
its slot's position before it attends to positions 0..its own, and a clip's tokens 0..T-1 are all in the call, so
what an earlier call left in a slot is never read.

Buckets: 64 tokens up to `max_clips` x 128, 4 to an octave (64, 80, 96, 112, 128, 160 ...; the engine option
`aligner_graph_steps`; engine/graphs.py bucket_ladder), so a call pads its tokens by at most a quarter. A call with
more clips than `max_clips` (64 by default, the engine option `aligner_graph_clips`), a prompt longer than
`max_positions` or more tokens than the largest bucket runs the packed decoder eagerly instead (the same result).
Memory: the store (the official aligner, 28 layers, 384 positions, bf16: ~1.5 GB for 32 clips, 2.9 GB for 64) and
the graphs' activations.
"""

from __future__ import annotations

import torch

from ..graphs import GraphSet, bucket_ladder, smallest_bucket, upload
from ..qwen3tts.fused_stack import FusedStack
from ..qwen3tts.model.layers import DecoderStack

MAX_CLIPS = 64  # the engine option aligner_graph_clips
GRAPH_STEPS = 4  # buckets to an octave, for tokens and chunks (the engine option aligner_graph_steps)
MAX_POSITIONS = 384
TOKENS_PER_CLIP = 128  # the largest token bucket: this many per clip (a clip of ~5 s with its words)


def token_buckets(max_clips: int, steps: int = GRAPH_STEPS) -> tuple[int, ...]:
    """64 tokens up to max_clips x TOKENS_PER_CLIP (rounded up to a power of two), `steps` buckets to an octave
    (engine/graphs.py bucket_ladder: 4 gives 64, 80, 96, 112, 128, 160 ...)."""
    return bucket_ladder(1 << (max_clips * TOKENS_PER_CLIP - 1).bit_length(), steps, least=64)


class CapturedDecoder:
    def __init__(self, stack: FusedStack, decoder: DecoderStack, device: torch.device, dtype: torch.dtype,
                 buckets: tuple[int, ...] | None = None, max_clips: int = MAX_CLIPS,
                 max_positions: int = MAX_POSITIONS, prefill: bool = False, steps: int = GRAPH_STEPS) -> None:
        cfg = decoder.cfg
        self.stack, self.buckets = stack, tuple(sorted(buckets or token_buckets(max_clips, steps)))
        self.max_clips, self.max_positions = max_clips, max_positions
        self.sink = max_clips  # the padding's slot
        self.store = torch.zeros((cfg.num_hidden_layers, 2, max_clips + 1, cfg.num_key_value_heads, max_positions,
                                  cfg.head_dim), dtype=dtype, device=device)
        self.cos, self.sin = (t.clone() for t in decoder.rope(0, max_positions, device, dtype))
        self.hidden, self.device, self.dtype = cfg.hidden_size, device, dtype
        self.graphs: GraphSet[int] = GraphSet(device)
        self._io: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}
        # prefill: attention a block of a clip's tokens at a time (kernels/prefill_attention.py), from a block table
        # per bucket that each call fills; its idle rows launch programs that do nothing.
        self.prefill = prefill
        self._tables: dict[int, torch.Tensor] = {}
        if prefill:  # imported here: the kernel module needs Triton
            from ...kernels.prefill_attention import block_table

            self._block_table = block_table

    def capture(self, progress: bool = True) -> None:
        self.graphs.capture(self.buckets, self._make, size=lambda n: n, desc="aligner decoder graphs",
                            progress=progress)

    def _make(self, tokens: int):  # type: ignore[no-untyped-def]
        x = torch.zeros((tokens, self.hidden), dtype=self.dtype, device=self.device)
        slots = torch.full((tokens,), self.sink, dtype=torch.int64, device=self.device)
        positions = torch.zeros(tokens, dtype=torch.int64, device=self.device)
        self._io[tokens] = x, slots, positions
        ks, vs = list(self.store[:, 0]), list(self.store[:, 1])
        attend = None
        if self.prefill:
            from ...kernels.prefill_attention import max_blocks, prefill_attention

            table = torch.zeros((max_blocks(tokens, self.max_clips), 4), dtype=torch.int64, device=self.device)
            self._tables[tokens] = table

            def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
                return prefill_attention(q, k, v, table)

        @torch.inference_mode()
        def run() -> torch.Tensor:
            return self.stack.forward(x, ks, vs, slots, positions, self.cos, self.sin, attend=attend)

        return run

    def fits(self, tokens: int, clips: int, longest: int) -> bool:
        return tokens <= self.buckets[-1] and clips <= self.max_clips and longest <= self.max_positions

    def __call__(self, x: torch.Tensor, slots: torch.Tensor, positions: torch.Tensor,
                 lengths: list[int]) -> torch.Tensor:
        """x [n, H] tokens of clips `slots` (0..clips-1) at `positions`, the clips' prompts of `lengths` tokens back
        to back -> the stack's output [n, H] (see `fits`)."""
        n = x.shape[0]
        bucket = smallest_bucket(self.buckets, n)
        bx, bs, bp = self._io[bucket]
        if self.prefill:  # padding tokens are in no block: their rows are garbage, never read
            table = self._tables[bucket]
            upload(table, self._block_table(lengths, rows=table.shape[0]))
        bx[:n].copy_(x)
        bx[n:].zero_()
        bs[:n].copy_(slots)
        bs[n:].fill_(self.sink)
        bp[:n].copy_(positions)
        bp[n:].zero_()
        return self.graphs(bucket)[:n].clone()

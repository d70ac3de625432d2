"""Incremental codec decode in plain PyTorch: each frame decoded once, from per-stream state held in a SlotPool.

The reference for the fast step (codec_fused.py) and the CPU engine's codec. Every decoder module is causal with
zero lookahead, so a stream carries, per slot (codec_state.state_layout):
- `pre_conv`, `upsample.{i}.dwconv`, `decoder.0`, `decoder.{b}.ru{j}`, `decoder.6`: each causal conv's last
  (k-1)*d inputs;
- `decoder.{b}.convt`: each causal transposed conv's last input frame (its output overlaps one frame);
- `kv`: the pre-transformer's last 71 keys (after RoPE) and values per layer (window 72 = self + 71 past);
- `frames`: the frame count, which gives the RoPE positions and which cached keys exist.
A fresh (zeroed) slot is exactly the zero left-padding of a whole-utterance decode.

One `step` decodes any set of streams, each with its own number of new frames: rows are right-padded to the
widest; causality keeps padding out of the real samples, and each state is taken at the row's own end (a gather
at index `num_frames * rate`). A step reads its rows' slots in one gather, runs each stateful conv over
[carried inputs | new inputs], writes every new state into the gathered rows and stores them back in one scatter.

Caller contract:
- codes are codec codes in [0, codebook_size) (-1 padding is read as 0, as in the whole decode). The Talker's EOS
  frame is not a codec frame and never reaches the codec: stop before it. An out-of-range code is an indexing
  error (a device-side assert on CUDA), never clamped into silence.
- in-context cloning: `warm` the slot with the reference codes (their audio is discarded) before the first step.
- a stream's audio for frame t is final when step returns it; there is no lookahead and no flush at the end.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from ...slot_pool import SlotPool
from ..model.layers import apply_rope, rope_tables
from .codec import CausalConvTranspose, CodecDecoder, SnakeBeta
from .codec_state import StreamingCodec, shared_arange, state_layout


def _tail(full: torch.Tensor, end: torch.Tensor, size: int, dim: int, out: torch.Tensor) -> None:
    """out <- full[b, ..., end[b] : end[b] + size, ...] along dim, per row (the last `size` real items)."""
    idx = end[:, None] + shared_arange(size, full.device)  # [B, size]
    shape = [full.shape[0]] + [1] * (full.dim() - 1)
    shape[dim] = size
    idx = idx.view(shape).expand(*[s if i != dim else size for i, s in enumerate(full.shape)])
    torch.gather(full, dim, idx, out=out)


class _Snake:
    """SnakeBeta in fp32 whatever the stream's dtype, with exp(alpha) and 1/(exp(beta)+1e-9) computed once (the
    module's own formula, per call)."""

    def __init__(self, m: SnakeBeta) -> None:
        self.alpha = m.alpha.detach().float().exp()[None, :, None]
        self.inv_beta = 1.0 / (m.beta.detach().float().exp() + 1e-9)[None, :, None]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf + self.inv_beta * torch.sin(xf * self.alpha).pow(2)).to(x.dtype)


class CodecStream(StreamingCodec):
    """Streams of one codec decoder, their state in a SlotPool of `num_slots` (slot 0 the sink).

    dtype: the compute and state dtype (default: the codec's; bf16 keeps SnakeBeta and the final clamp in fp32).
    The given codec is left untouched; a cast copy is made when dtype differs.
    """

    def __init__(self, codec: CodecDecoder, num_slots: int, dtype: torch.dtype | None = None) -> None:
        p = next(codec.parameters())
        self.dtype = dtype or p.dtype
        self.device = p.device
        self.cfg = codec.cfg
        work = codec if self.dtype == p.dtype else copy.deepcopy(codec).to(self.dtype)
        self.codec = work.eval()
        # the working copy's SnakeBeta modules -> their parameters from the given codec, in fp32
        self.snakes = {id(m): _Snake(src) for m, src in zip(work.modules(), codec.modules(), strict=True)
                       if isinstance(m, SnakeBeta)}
        q = work.quantizer
        # Codebook tables computed once, exactly as Codebook.table() computes them per call.
        self.tables = [layer._codebook.table().detach() for g in (q.rvq_first, q.rvq_rest) for layer in g.vq.layers]
        self.layout = state_layout(work, self.dtype)
        self.pool = SlotPool(self.layout, num_slots, self.device)
        self.samples_per_frame = self.cfg.samples_per_frame

    @torch.inference_mode()
    def step(self, slots: torch.Tensor, codes: torch.Tensor, num_frames: torch.Tensor) -> torch.Tensor:
        """Decode new frames of several streams and advance their state in the pool.

        slots [B] long (padding rows: 0, the sink); codes [B, T, Q] long, row b's first num_frames[b] frames real,
        the rest padding; num_frames [B] long in [0, T]. Returns float32 audio [B, T * samples_per_frame]: row b's
        first num_frames[b] * samples_per_frame samples are its stream's next audio, the rest is garbage.
        """
        rows = self.pool.gather_rows(slots)  # one read of every state of these rows
        audio = self._forward(self.pool.views_of(rows), codes, num_frames)  # new state written into rows
        self.pool.scatter_rows(slots, rows)  # one write back
        return audio

    def _forward(self, state: dict[str, torch.Tensor], codes: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        """One step's decode; every state view in `state` is read, then overwritten in place with its new value."""
        c, snake = self.codec, self._snake
        x = self._quantize(codes.clamp(min=0))  # [B, codebook_dim, T]
        rate = 1  # samples per frame at the current stage
        x = self._conv(c.pre_conv.conv, x, state["pre_conv"], n * rate)
        x = self._transformer(x.transpose(1, 2), state["kv"], state["frames"][:, 0], n).transpose(1, 2)
        for i, (convt, block) in enumerate(c.upsample):
            x = convt(x)  # kernel == stride: no overlap, no state
            rate *= convt.conv.stride[0]
            y = self._conv(block.dwconv.conv, x, state[f"upsample.{i}.dwconv"], n * rate)
            y = block.gamma * block.pwconv2(F.gelu(block.pwconv1(block.norm(y.transpose(1, 2)))))
            x = x + y.transpose(1, 2)
        x = self._conv(c.decoder[0].conv, x, state["decoder.0"], n * rate)
        for b in range(1, len(c.decoder) - 2):
            act, convt, *units = c.decoder[b].block
            x = self._convt(convt, snake(act, x), state[f"decoder.{b}.convt"], n * rate)
            rate *= convt.conv.stride[0]
            for j, ru in enumerate(units):
                h = self._conv(ru.conv1.conv, snake(ru.act1, x), state[f"decoder.{b}.ru{j}"], n * rate)
                x = x + ru.conv2(snake(ru.act2, h))
        last = len(c.decoder) - 1
        x = self._conv(c.decoder[last].conv, snake(c.decoder[last - 1], x), state[f"decoder.{last}"], n * rate)
        state["frames"].add_(n[:, None])  # last: the transformer read the old count
        return x[:, 0].float().clamp(-1.0, 1.0)

    def _snake(self, module: SnakeBeta, x: torch.Tensor) -> torch.Tensor:
        return self.snakes[id(module)](x)

    def _quantize(self, codes: torch.Tensor) -> torch.Tensor:
        """codes [B, T, Q] -> [B, codebook_dim, T]; the same sums in the same order as Quantizer."""
        q = self.codec.quantizer
        first = F.embedding(codes[:, :, 0], self.tables[0])
        rest = F.embedding(codes[:, :, 1], self.tables[1])
        for i in range(2, len(self.tables)):
            rest = rest + F.embedding(codes[:, :, i], self.tables[i])
        return q.rvq_first.output_proj(first.transpose(1, 2)) + q.rvq_rest.output_proj(rest.transpose(1, 2))

    @staticmethod
    def _conv(conv: nn.Conv1d, x: torch.Tensor, carried: torch.Tensor, end: torch.Tensor) -> torch.Tensor:
        """Causal conv of x [B, C, L] continuing from the slot's carried inputs [B, C, H]; `carried` becomes the
        last H inputs up to each row's `end` (in place)."""
        full = torch.cat([carried, x], dim=2)
        y = F.conv1d(full, conv.weight, conv.bias, dilation=conv.dilation, groups=conv.groups)
        _tail(full, end, carried.shape[2], dim=2, out=carried)
        return y

    @staticmethod
    def _convt(m: CausalConvTranspose, x: torch.Tensor, carried: torch.Tensor, end: torch.Tensor) -> torch.Tensor:
        """Causal transposed conv (kernel 2s, stride s) of x [B, C, T] after the slot's last input frame."""
        s = m.conv.stride[0]
        full = torch.cat([carried, x], dim=2)
        y = m.conv(full)  # [B, Cout, (T + 2) * s]; samples s .. (T+1)s-1 belong to the new frames
        _tail(full, end, 1, dim=2, out=carried)
        return y[..., s: s * (x.shape[2] + 1)]

    def _transformer(self, x: torch.Tensor, kv: torch.Tensor, pos0: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        """x [B, T, latent] after each row's pos0 frames -> y [B, T, latent]; kv [B, L, 2, H, W-1, D] is read, then
        overwritten in place with the new window."""
        tf, cfg = self.codec.pre_transformer, self.cfg
        b, t = x.shape[:2]
        past = kv.shape[4]  # W - 1
        x = tf.input_proj(x)
        positions = pos0[:, None] + shared_arange(t, x.device)
        cos, sin = rope_tables(positions.reshape(-1), cfg.head_dim, cfg.rope_theta, x.dtype)
        cos, sin = cos.view(b, 1, t, -1), sin.view(b, 1, t, -1)
        # Key j of [cached past ++ new] sits at position pos0 - past + j; query i at pos0 + i.
        j = shared_arange(past + t, x.device)
        i = shared_arange(t, x.device)[:, None]
        mask = (j >= i) & (j <= i + past)  # [T, K]: causal, and within the window of past + 1
        mask = mask[None, None] & (j >= past - pos0[:, None])[:, None, None, :]  # [B, 1, T, K]: keys that exist
        for li, layer in enumerate(tf.layers):
            attn = layer.self_attn
            h = layer.input_layernorm(x)
            q = attn.q_proj(h).view(b, t, attn.heads, attn.head_dim).transpose(1, 2)
            k = attn.k_proj(h).view(b, t, attn.kv_heads, attn.head_dim).transpose(1, 2)
            v = attn.v_proj(h).view(b, t, attn.kv_heads, attn.head_dim).transpose(1, 2)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
            k = torch.cat([kv[:, li, 0], k], dim=2)
            v = torch.cat([kv[:, li, 1], v], dim=2)
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            x = x + layer.self_attn_layer_scale(attn.o_proj(o.transpose(1, 2).reshape(b, t, -1)))
            x = x + layer.mlp_layer_scale(layer.mlp(layer.post_attention_layernorm(x)))
            _tail(k, n, past, dim=2, out=kv[:, li, 0])
            _tail(v, n, past, dim=2, out=kv[:, li, 1])
        return tf.output_proj(tf.norm(x))

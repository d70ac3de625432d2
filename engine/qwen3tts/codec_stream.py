"""Incremental codec decode: each frame decoded once, from per-stream state held in a SlotPool (design §9).

Every decoder module is causal with zero lookahead, so a stream carries, per slot:
- `pre_conv`, `upsample.{i}.dwconv`, `decoder.0`, `decoder.{b}.ru{j}`, `decoder.6`: each causal conv's last
  (k-1)*d inputs;
- `decoder.{b}.convt`: each causal transposed conv's last input frame (its output overlaps one frame);
- `kv`: the pre-transformer's last 71 keys (after RoPE) and values per layer (window 72 = self + 71 past);
- `frames`: the frame count, which gives the RoPE positions and which cached keys exist.
A fresh (zeroed) slot is exactly the zero left-padding of a whole-utterance decode.

One `step` decodes any set of streams, each with its own number of new frames: rows are right-padded to the
widest; causality keeps padding out of the real samples, and each state is taken at the row's own end (a gather
at index `num_frames * rate`). All shapes depend only on (rows, width), so a step can be captured in a CUDA graph
per bucket; padding rows point at the pool's sink slot 0. A step reads its rows' slots in one launch, writes every
new state in place into those rows, and stores them back in one launch. Each stateful conv reads one buffer
[carried inputs | new inputs]; the SnakeBeta before it writes straight into the new part (no `cat`).

Caller contract:
- codes are codec codes in [0, codebook_size) (-1 padding is read as 0, as in the whole decode). The Talker's EOS
  frame is not a codec frame and never reaches the codec: stop before it. An out-of-range code is an indexing
  error (a device-side assert on CUDA), never clamped into silence.
- in-context cloning: `warm` the slot with the reference codes (their audio is discarded) before the first step.
- a stream's audio for frame t is final when step returns it; there is no lookahead and no flush at the end.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from ..slot_pool import SlotPool
from .codec import CausalConvTranspose, CodecDecoder, SnakeBeta
from .codec_state import StreamingCodec, shared_arange, state_layout
from .layers import apply_rope, rope_tables


def _tail(full: torch.Tensor, end: torch.Tensor, size: int, dim: int, out: torch.Tensor) -> None:
    """out <- full[b, ..., end[b] : end[b] + size, ...] along dim, per row (the last `size` real items)."""
    idx = end[:, None] + shared_arange(size, full.device)  # [B, size]
    shape = [full.shape[0]] + [1] * (full.dim() - 1)
    shape[dim] = size
    idx = idx.view(shape).expand(*[s if i != dim else size for i, s in enumerate(full.shape)])
    torch.gather(full, dim, idx, out=out)


def conv1d_undilated(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, dilation: int,
                     length: int | None = None) -> torch.Tensor:
    """F.conv1d(x, weight, bias, dilation=d) (no padding) as an undilated conv over the d interleaved subsequences.

    x [B, C, P] -> [B, Cout, P - (k-1)*d]. Subsequence r = x[..., r::d] holds every input the outputs at positions
    r (mod d) read, so the d subsequences run as d extra batch rows of a plain conv (cuDNN's dilated kernels are
    slow in bf16 on Hopper). length: only x[..., :length] is real (x already padded to a multiple of d: no pad).
    """
    if dilation == 1:
        return F.conv1d(x if length is None else x[..., :length], weight, bias)
    b, c, size = x.shape
    p = size if length is None else length
    k, d = weight.shape[-1], dilation
    m = -(-size // d)
    if m * d != size:
        x = F.pad(x, (0, m * d - size))  # right zeros only reach outputs past the end, which are cut
    xs = x.view(b, c, m, d).permute(0, 3, 1, 2).reshape(b * d, c, m)
    y = F.conv1d(xs, weight, bias)  # [B*d, Cout, m-k+1]; row (b, r) output j is position j*d + r
    cout, n = y.shape[1], y.shape[2]
    y = y.view(b, d, cout, n).permute(0, 2, 3, 1).reshape(b, cout, n * d)
    return y[..., : p - (k - 1) * d]


class _Snake:
    """SnakeBeta with exp(alpha) and 1/(exp(beta)+1e-9) precomputed in fp32 (same ops as the module, once).

    fused: kernels/snake.py's one-pass Triton kernel (else the module's formula in PyTorch ops). out: a view to
    write the result into (the next conv's input buffer), same values as a copy of the result.
    """

    fused: Callable[..., torch.Tensor] | None = None

    def __init__(self, m: SnakeBeta) -> None:
        self.alpha_c = m.alpha.detach().float().exp()
        self.inv_beta_c = 1.0 / (m.beta.detach().float().exp() + 1e-9)
        self.alpha, self.inv_beta = self.alpha_c[None, :, None], self.inv_beta_c[None, :, None]

    def __call__(self, x: torch.Tensor, out: torch.Tensor | None = None, bias: torch.Tensor | None = None,
                 ) -> torch.Tensor:
        """bias: a conv's bias, added to x first (in x's dtype) when the conv ran without it."""
        if self.fused is not None:
            return self.fused(x, self.alpha_c, self.inv_beta_c, out=out, bias=bias)
        if bias is not None:
            x = x + bias[None, :, None]
        xf = x if x.dtype == torch.float32 else x.float()
        y = xf + self.inv_beta * torch.sin(xf * self.alpha).pow(2)
        y = y if x.dtype == torch.float32 else y.to(x.dtype)
        return y if out is None else out.copy_(y)


class CodecStream(StreamingCodec):
    """Streams of one codec decoder, their state in a SlotPool of `num_slots` (slot 0 the sink).

    dtype: the compute and state dtype (bf16 keeps SnakeBeta and the final clamp in fp32). The given codec is
    left untouched; a cast copy is made when dtype differs. undilate: run dilated convs as undilated convs over
    interleaved subsequences (same values up to summation order).
    """

    def __init__(self, codec: CodecDecoder, num_slots: int, dtype: torch.dtype | None = None,
                 undilate: bool = False, fused_snake: bool | None = None) -> None:
        p = next(codec.parameters())
        self.dtype = dtype or p.dtype
        self.device = p.device
        self.undilate = undilate
        self.gemm_1x1 = True  # with the Triton kernels: residual units' 1x1 convs as batched GEMMs (no NHWC copies)
        self.cfg = codec.cfg
        self.snakes = {id(m): _Snake(m) for m in codec.modules() if isinstance(m, SnakeBeta)}
        if self.dtype != p.dtype:
            src = codec
            codec = copy.deepcopy(codec).to(self.dtype)
            self.snakes = {id(m): self.snakes[id(s)] for m, s in zip(codec.modules(), src.modules(), strict=True)
                           if isinstance(m, SnakeBeta)}
        self.codec = codec.eval()
        self.fused_snake_error: str | None = None
        if fused_snake is None:  # default: on CUDA below fp32 (fp32 keeps torch.sin, for exactness)
            fused_snake = self.device.type == "cuda" and self.dtype != torch.float32
        self.set_fused_snake(fused_snake)
        q = codec.quantizer
        # Codebook tables computed once, exactly as Codebook.table() computes them per call.
        self.tables = [layer._codebook.table().detach() for g in (q.rvq_first, q.rvq_rest) for layer in g.vq.layers]
        self.layout = state_layout(codec, self.dtype)
        self.pool = SlotPool(self.layout, num_slots, self.device)
        self.samples_per_frame = self.cfg.samples_per_frame

    def set_fused_snake(self, on: bool) -> bool:
        """Use the Triton SnakeBeta (after a check against the reference); False, with the reason, if unusable."""
        fn, self.fused_snake_error = None, None
        self.bias_residual: Callable[..., torch.Tensor] | None = None
        if on:
            try:
                from ...kernels.snake import bias_residual, bias_residual_ref, snake, snake_ref

                g = torch.Generator(self.device).manual_seed(0)  # leaves the global RNG alone
                x = torch.randn(2, 3, 1500, device=self.device, generator=g).to(self.dtype)
                a = torch.rand(3, device=self.device, generator=g) + 0.5
                ib = torch.rand(3, device=self.device, generator=g) + 0.5
                torch.testing.assert_close(snake(x, a, ib).float(), snake_ref(x, a, ib).float(), atol=2e-2, rtol=2e-2)
                bias = a.to(self.dtype)
                torch.testing.assert_close(snake(x, a, ib, bias=bias).float(), snake_ref(x, a, ib, bias).float(),
                                           atol=2e-2, rtol=2e-2)
                y = x.flip(2)
                torch.testing.assert_close(bias_residual(x, y, bias).float(), bias_residual_ref(x, y, bias).float(),
                                           atol=2e-2, rtol=2e-2)
                fn, self.bias_residual = snake, bias_residual
            except Exception as exc:  # no triton, no GPU, or a wrong result: the PyTorch ops serve
                self.fused_snake_error = f"{type(exc).__name__}: {exc}"
        for sn in self.snakes.values():
            sn.fused = fn
        return fn is not None

    @property
    def fused_snake(self) -> bool:
        return next(iter(self.snakes.values())).fused is not None

    # -- decode -----------------------------------------------------------------------------------------------
    @torch.inference_mode()
    def step(self, slots: torch.Tensor, codes: torch.Tensor, num_frames: torch.Tensor) -> torch.Tensor:
        """Decode new frames of several streams and advance their state in the pool.

        slots [B] long (padding rows: 0, the sink); codes [B, T, Q] long, row b's first num_frames[b] frames real,
        the rest padding; num_frames [B] long in [0, T]. Returns float32 audio [B, T * samples_per_frame]: row b's
        first num_frames[b] * samples_per_frame samples are its stream's next audio, the rest is garbage.
        No host sync: every shape depends on (B, T) only.
        """
        pool = self.pool
        rows = pool.gather_rows(slots)  # one read of every state of these rows
        audio = self._forward(pool.views_of(rows), codes, num_frames)  # new state written in place into rows
        pool.scatter_rows(slots, rows)  # one write back
        return audio

    def _forward(self, state: dict[str, torch.Tensor], codes: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        """One step's decode; every state view in `state` is read, then overwritten in place with its new value."""
        c = self.codec
        codes = codes.clamp(min=0)
        x = self._quantize(codes)  # [B, codebook_dim, T]
        rate = 1  # samples per frame at the current stage
        x = self._conv("pre_conv", c.pre_conv.conv, x, state, n * rate)
        x = self._transformer(x.transpose(1, 2), state["kv"], state["frames"][:, 0], n)
        x = x.transpose(1, 2)
        for i, (convt, block) in enumerate(c.upsample):
            x = convt(x)  # kernel == stride: no overlap, no state
            rate *= convt.conv.stride[0]
            y = self._conv(f"upsample.{i}.dwconv", block.dwconv.conv, x, state, n * rate)
            y = block.norm(y.transpose(1, 2))
            y = block.gamma * block.pwconv2(F.gelu(block.pwconv1(y)))
            x = x + y.transpose(1, 2)
        x = self._conv("decoder.0", c.decoder[0].conv, x, state, n * rate)
        for b in range(1, len(c.decoder) - 2):
            snake, convt, *units = c.decoder[b].block
            x = self._convt(f"decoder.{b}.convt", convt, x, state, n * rate, self.snakes[id(snake)])
            rate *= convt.conv.stride[0]
            for j, ru in enumerate(units):
                c1, c2 = ru.conv1.conv, ru.conv2.conv
                # with the Triton kernels, the conv biases go into the next pass instead of their own add_
                fold = self.bias_residual is not None and c1.bias is not None and c2.bias is not None
                h = self._conv(f"decoder.{b}.ru{j}", c1, x, state, n * rate, self.snakes[id(ru.act1)], not fold)
                if fold:
                    h = self.snakes[id(ru.act2)](h, bias=c1.bias)
                    w2 = c2.weight
                    h = torch.matmul(w2[:, :, 0], h) if self.gemm_1x1 else F.conv1d(h, w2)  # the 1x1 conv
                    x = self.bias_residual(x, h, c2.bias)
                else:
                    x = x + c2(self.snakes[id(ru.act2)](h))
        last = len(c.decoder) - 1
        x = self._conv(f"decoder.{last}", c.decoder[-1].conv, x, state, n * rate, self.snakes[id(c.decoder[-2])])
        state["frames"].add_(n[:, None])  # last: the transformer read the old count
        return x[:, 0].float().clamp(-1.0, 1.0)

    def _quantize(self, codes: torch.Tensor) -> torch.Tensor:
        """codes [B, T, Q] -> [B, codebook_dim, T]; the same sums in the same order as Quantizer."""
        q = self.codec.quantizer
        first = F.embedding(codes[:, :, 0], self.tables[0])
        rest = F.embedding(codes[:, :, 1], self.tables[1])
        for i in range(2, len(self.tables)):
            rest = rest + F.embedding(codes[:, :, i], self.tables[i])
        return q.rvq_first.output_proj(first.transpose(1, 2)) + q.rvq_rest.output_proj(rest.transpose(1, 2))

    def _input(self, name: str, x: torch.Tensor, state: dict[str, torch.Tensor], snake: _Snake | None,
               multiple: int = 1) -> tuple[torch.Tensor, int]:
        """One buffer [B, C, P] = [slot's carried inputs | snake(x) or x]; P is rounded up to `multiple` (zeros
        after the real part). snake writes straight into the buffer: no `cat`. Returns (buffer, real length)."""
        carried = state[name]
        b, ch, left = carried.shape
        p = left + x.shape[2]
        size = -(-p // multiple) * multiple
        buf = torch.empty(b, ch, size, dtype=carried.dtype, device=carried.device)
        buf[..., :left].copy_(carried)
        if size > p:
            buf[..., p:].zero_()
        if snake is None:
            buf[..., left:p].copy_(x)
        else:
            snake(x, out=buf[..., left:p])
        return buf, p

    def _conv(self, name: str, conv: nn.Conv1d, x: torch.Tensor, state: dict[str, torch.Tensor], end: torch.Tensor,
              snake: _Snake | None = None, with_bias: bool = True) -> torch.Tensor:
        """Causal conv of x [B, C, L] (snake(x) if given) continuing from the slot's last inputs; the slot's state
        becomes the last ones up to `end` (written in place). with_bias=False: the caller adds the bias."""
        d = conv.dilation[0]
        undilate = self.undilate and d > 1
        full, p = self._input(name, x, state, snake, d if undilate else 1)
        bias = conv.bias if with_bias else None
        if undilate:
            y = conv1d_undilated(full, conv.weight, bias, d, length=p)
        else:
            y = F.conv1d(full, conv.weight, bias, dilation=d, groups=conv.groups)
        _tail(full, end, state[name].shape[2], dim=2, out=state[name])
        return y

    def _convt(self, name: str, m: CausalConvTranspose, x: torch.Tensor, state: dict[str, torch.Tensor],
               end: torch.Tensor, snake: _Snake) -> torch.Tensor:
        """Causal transposed conv (kernel 2s, stride s) of snake(x) [B, C, T] after the slot's last input frame."""
        s = m.conv.stride[0]
        full, _ = self._input(name, x, state, snake)
        y = m.conv(full)  # [B, Cout, (T + 2) * s]; samples s .. (T+1)s-1 belong to the new frames
        _tail(full, end, 1, dim=2, out=state[name])
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

def snr_db(x: torch.Tensor, ref: torch.Tensor) -> float:
    """Signal-to-noise ratio of x against ref in dB (inf when equal)."""
    noise = (x.double() - ref.double()).pow(2).sum()
    return float(10 * torch.log10(ref.double().pow(2).sum() / noise)) if noise > 0 else float("inf")

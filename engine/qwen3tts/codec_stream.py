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
per bucket; padding rows point at the pool's sink slot 0.

Caller contract:
- codes are codec codes in [0, codebook_size) (-1 padding is read as 0, as in the whole decode). The Talker's EOS
  frame is not a codec frame and never reaches the codec: stop before it. An out-of-range code is an indexing
  error (a device-side assert on CUDA), never clamped into silence.
- in-context cloning: `warm` the slot with the reference codes (their audio is discarded) before the first step.
- a stream's audio for frame t is final when step returns it; there is no lookahead and no flush at the end.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ..slot_pool import SlotPool, SlotSpec
from .codec import CausalConvTranspose, CodecDecoder, SnakeBeta
from .layers import apply_rope, rope_tables


def load_codec(path: str | Path, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
               ) -> CodecDecoder:
    """Only the codec decoder of a checkpoint directory (`speech_tokenizer/`), through the project's loader."""
    from .checkpoint import CODEC_DIR, IGNORED_CODEC_PREFIXES, CodecWeights, load_into, resolve, weight_files
    from .config import load_config

    directory = resolve(path)
    cfg = load_config(directory)
    with torch.device("meta"):
        weights = CodecWeights(cfg)
    load_into(weights, weight_files(directory / CODEC_DIR), dtype, torch.device(device), "speech_tokenizer",
              ignore_prefixes=IGNORED_CODEC_PREFIXES, progress=False)
    return weights.decoder.eval()


def conv1d_undilated(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, dilation: int) -> torch.Tensor:
    """F.conv1d(x, weight, bias, dilation=d) (no padding) as an undilated conv over the d interleaved subsequences.

    x [B, C, P] -> [B, Cout, P - (k-1)*d]. Subsequence r = x[..., r::d] holds every input the outputs at positions
    r (mod d) read, so the d subsequences run as d extra batch rows of a plain conv (cuDNN's dilated kernels are
    slow in bf16 on Hopper).
    """
    if dilation == 1:
        return F.conv1d(x, weight, bias)
    b, c, p = x.shape
    k, d = weight.shape[-1], dilation
    m = -(-p // d)
    x = F.pad(x, (0, m * d - p))  # right zeros only reach outputs past the end, which are cut
    xs = x.view(b, c, m, d).permute(0, 3, 1, 2).reshape(b * d, c, m)
    y = F.conv1d(xs, weight, bias)  # [B*d, Cout, m-k+1]; row (b, r) output j is position j*d + r
    cout, n = y.shape[1], y.shape[2]
    y = y.view(b, d, cout, n).permute(0, 2, 3, 1).reshape(b, cout, n * d)
    return y[..., : p - (k - 1) * d]


@functools.cache
def _arange(n: int, device: torch.device) -> torch.Tensor:
    """A shared constant 0..n-1 (one launch fewer per use inside a step; stable address for graph replay)."""
    return torch.arange(n, device=device)


def _tail(full: torch.Tensor, end: torch.Tensor, size: int, dim: int) -> torch.Tensor:
    """full[b, ..., end[b] : end[b] + size, ...] along dim, per row (the last `size` real items before padding)."""
    idx = end[:, None] + _arange(size, full.device)  # [B, size]
    shape = [full.shape[0]] + [1] * (full.dim() - 1)
    shape[dim] = size
    idx = idx.view(shape).expand(*[s if i != dim else size for i, s in enumerate(full.shape)])
    return torch.gather(full, dim, idx)


class _Snake:
    """SnakeBeta with exp(alpha) and 1/(exp(beta)+1e-9) precomputed in fp32 (same ops as the module, once).

    fused: kernels/snake.py's one-pass Triton kernel (else the module's formula in PyTorch ops).
    """

    fused: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor] | None = None

    def __init__(self, m: SnakeBeta) -> None:
        self.alpha_c = m.alpha.detach().float().exp()
        self.inv_beta_c = 1.0 / (m.beta.detach().float().exp() + 1e-9)
        self.alpha, self.inv_beta = self.alpha_c[None, :, None], self.inv_beta_c[None, :, None]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.fused is not None:
            return self.fused(x, self.alpha_c, self.inv_beta_c)
        xf = x if x.dtype == torch.float32 else x.float()
        y = xf + self.inv_beta * torch.sin(xf * self.alpha).pow(2)
        return y if x.dtype == torch.float32 else y.to(x.dtype)


def state_layout(codec: CodecDecoder, dtype: torch.dtype) -> dict[str, SlotSpec]:
    """Name -> per-slot tensor of the streaming state (see the module docstring)."""
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


class CodecStream:
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
        if on:
            try:
                from ...kernels.snake import snake, snake_ref

                g = torch.Generator(self.device).manual_seed(0)  # leaves the global RNG alone
                x = torch.randn(2, 3, 1500, device=self.device, generator=g).to(self.dtype)
                a = torch.rand(3, device=self.device, generator=g) + 0.5
                ib = torch.rand(3, device=self.device, generator=g) + 0.5
                torch.testing.assert_close(snake(x, a, ib).float(), snake_ref(x, a, ib).float(), atol=2e-2, rtol=2e-2)
                fn = snake
            except Exception as exc:  # no triton, no GPU, or a wrong result: the PyTorch ops serve
                self.fused_snake_error = f"{type(exc).__name__}: {exc}"
        for sn in self.snakes.values():
            sn.fused = fn
        return fn is not None

    @property
    def fused_snake(self) -> bool:
        return next(iter(self.snakes.values())).fused is not None

    # -- slots ------------------------------------------------------------------------------------------------
    def open(self) -> int:
        """A fresh slot for a new stream (PoolFull if none: check pool.can_allocate() first)."""
        return self.pool.allocate()

    def close(self, slot: int) -> None:
        """Release a stream's slot on end or cancel."""
        self.pool.free(slot)

    def state_values(self) -> int:
        return state_values(self.layout)

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
        state = pool.gather(slots)
        new: dict[str, torch.Tensor] = {}
        audio = self._forward(state, new, codes, num_frames)
        for name, value in new.items():
            pool[name][slots] = value
        return audio

    def warm(self, slots: torch.Tensor, codes: torch.Tensor, num_frames: torch.Tensor) -> None:
        """In-context cloning: run the reference codes through the state and discard their audio."""
        self.step(slots, codes, num_frames)

    def _forward(self, state: dict[str, torch.Tensor], new: dict[str, torch.Tensor], codes: torch.Tensor,
                 n: torch.Tensor) -> torch.Tensor:
        c = self.codec
        codes = codes.clamp(min=0)
        x = self._quantize(codes)  # [B, codebook_dim, T]
        rate = 1  # samples per frame at the current stage
        x = self._conv("pre_conv", c.pre_conv.conv, x, state, new, n * rate)
        pos0 = state["frames"][:, 0]
        new["frames"] = state["frames"] + n[:, None]
        x, new["kv"] = self._transformer(x.transpose(1, 2), state["kv"], pos0, n)
        x = x.transpose(1, 2)
        for i, (convt, block) in enumerate(c.upsample):
            x = convt(x)  # kernel == stride: no overlap, no state
            rate *= convt.conv.stride[0]
            y = self._conv(f"upsample.{i}.dwconv", block.dwconv.conv, x, state, new, n * rate)
            y = block.norm(y.transpose(1, 2))
            y = block.gamma * block.pwconv2(F.gelu(block.pwconv1(y)))
            x = x + y.transpose(1, 2)
        x = self._conv("decoder.0", c.decoder[0].conv, x, state, new, n * rate)
        for b in range(1, len(c.decoder) - 2):
            snake, convt, *units = c.decoder[b].block
            x = self._convt(f"decoder.{b}.convt", convt, self.snakes[id(snake)](x), state, new, n * rate)
            rate *= convt.conv.stride[0]
            for j, ru in enumerate(units):
                h = self.snakes[id(ru.act1)](x)
                h = self._conv(f"decoder.{b}.ru{j}", ru.conv1.conv, h, state, new, n * rate)
                x = x + ru.conv2.conv(self.snakes[id(ru.act2)](h))
        x = self.snakes[id(c.decoder[-2])](x)
        last = len(c.decoder) - 1
        x = self._conv(f"decoder.{last}", c.decoder[-1].conv, x, state, new, n * rate)
        return x[:, 0].float().clamp(-1.0, 1.0)

    def _quantize(self, codes: torch.Tensor) -> torch.Tensor:
        """codes [B, T, Q] -> [B, codebook_dim, T]; the same sums in the same order as Quantizer."""
        q = self.codec.quantizer
        first = F.embedding(codes[:, :, 0], self.tables[0])
        rest = F.embedding(codes[:, :, 1], self.tables[1])
        for i in range(2, len(self.tables)):
            rest = rest + F.embedding(codes[:, :, i], self.tables[i])
        return q.rvq_first.output_proj(first.transpose(1, 2)) + q.rvq_rest.output_proj(rest.transpose(1, 2))

    def _conv(self, name: str, conv: nn.Conv1d, x: torch.Tensor, state: dict[str, torch.Tensor],
              new: dict[str, torch.Tensor], end: torch.Tensor) -> torch.Tensor:
        """Causal conv of x [B, C, L] continuing from the slot's last inputs; keeps the last ones up to `end`."""
        full = torch.cat([state[name], x], dim=2)
        d = conv.dilation[0]
        if self.undilate and d > 1:
            y = conv1d_undilated(full, conv.weight, conv.bias, d)
        else:
            y = F.conv1d(full, conv.weight, conv.bias, dilation=d, groups=conv.groups)
        new[name] = _tail(full, end, state[name].shape[2], dim=2)
        return y

    def _convt(self, name: str, m: CausalConvTranspose, x: torch.Tensor, state: dict[str, torch.Tensor],
               new: dict[str, torch.Tensor], end: torch.Tensor) -> torch.Tensor:
        """Causal transposed conv (kernel 2s, stride s) of x [B, C, T] after the slot's last input frame."""
        s = m.conv.stride[0]
        full = torch.cat([state[name], x], dim=2)
        y = m.conv(full)  # [B, Cout, (T + 2) * s]; samples s .. (T+1)s-1 belong to the new frames
        new[name] = _tail(full, end, 1, dim=2)
        return y[..., s: s * (x.shape[2] + 1)]

    def _transformer(self, x: torch.Tensor, kv: torch.Tensor, pos0: torch.Tensor, n: torch.Tensor,
                     ) -> tuple[torch.Tensor, torch.Tensor]:
        """x [B, T, latent] after each row's pos0 frames; kv [B, L, 2, H, W-1, D] -> (y [B, T, latent], new kv)."""
        tf, cfg = self.codec.pre_transformer, self.cfg
        b, t = x.shape[:2]
        past = kv.shape[4]  # W - 1
        x = tf.input_proj(x)
        positions = pos0[:, None] + _arange(t, x.device)
        cos, sin = rope_tables(positions.reshape(-1), cfg.head_dim, cfg.rope_theta, x.dtype)
        cos, sin = cos.view(b, 1, t, -1), sin.view(b, 1, t, -1)
        # Key j of [cached past ++ new] sits at position pos0 - past + j; query i at pos0 + i.
        j = _arange(past + t, x.device)
        i = _arange(t, x.device)[:, None]
        mask = (j >= i) & (j <= i + past)  # [T, K]: causal, and within the window of past + 1
        mask = mask[None, None] & (j >= past - pos0[:, None])[:, None, None, :]  # [B, 1, T, K]: keys that exist
        new_kv = torch.empty_like(kv)
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
            new_kv[:, li, 0] = _tail(k, n, past, dim=2)
            new_kv[:, li, 1] = _tail(v, n, past, dim=2)
        return tf.output_proj(tf.norm(x)), new_kv

    # -- convenience (eager, host-side) -------------------------------------------------------------------------
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


def snr_db(x: torch.Tensor, ref: torch.Tensor) -> float:
    """Signal-to-noise ratio of x against ref in dB (inf when equal)."""
    noise = (x.double() - ref.double()).pow(2).sum()
    return float(10 * torch.log10(ref.double().pow(2).sum() / noise)) if noise > 0 else float("inf")


class CapturedStep:
    """CodecStream.step for one (rows, frames) bucket, captured in a CUDA graph (replay: no Python per module).

    Inputs are copied into static buffers; rows beyond the caller's point at the sink slot with 0 frames. The
    capture's warm-up runs on sink rows only, so live streams are untouched. The returned audio is a view of the
    graph's static output: use it (or clone it) before the next replay.
    """

    def __init__(self, stream: CodecStream, rows: int, frames: int, mempool: tuple[int, int] | None = None,
                 warmup: int = 3, enforce_eager: bool = False) -> None:
        dev = stream.device
        self.stream, self.rows, self.frames = stream, rows, frames
        self.slots = torch.zeros(rows, dtype=torch.long, device=dev)
        self.codes = torch.zeros(rows, frames, stream.cfg.num_quantizers, dtype=torch.long, device=dev)
        self.num_frames = torch.zeros(rows, dtype=torch.long, device=dev)
        self.graph: torch.cuda.CUDAGraph | None = None
        if enforce_eager or dev.type != "cuda":  # same buffers and padding, the step run eagerly
            return
        side = torch.cuda.Stream(device=dev)
        side.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(side):
            for _ in range(warmup):
                stream.step(self.slots, self.codes, self.num_frames)
        torch.cuda.current_stream(dev).wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, pool=mempool):
            self.audio = stream.step(self.slots, self.codes, self.num_frames)

    def __call__(self, slots: torch.Tensor, codes: torch.Tensor, num_frames: torch.Tensor) -> torch.Tensor:
        n, t = codes.shape[:2]
        assert n <= self.rows and t <= self.frames, (n, t, self.rows, self.frames)
        self.slots[:n].copy_(slots)
        self.slots[n:] = 0
        self.codes[:n, :t].copy_(codes)
        self.num_frames[:n].copy_(num_frames)
        self.num_frames[n:] = 0
        if self.graph is None:
            self.audio = self.stream.step(self.slots, self.codes, self.num_frames)
        else:
            self.graph.replay()
        return self.audio[:n, : t * self.stream.samples_per_frame]

"""The incremental codec's fast step: time-major activations and Triton kernels, ~150 launches per step.

Same contract and state as codec_stream.CodecStream (its plain-PyTorch reference, checked against it in
tests/qwen3tts/test_codec_fused.py), laid out for the kernels instead of for cuDNN:
- Activations are [B, L, C], C contiguous: every conv is a GEMM over its taps (kernels/causal_conv.py) and the
  transformer's projections are plain matmuls, with no NCHW <-> NHWC transposes.
- Each conv's carried inputs stay in the pool ([slot, H, C]) and the conv reads them in place; a small kernel
  then moves the window to each row's end. No per-step gather or scatter of state.
- SnakeBeta runs in the epilogue of the conv before it (the conv's result is activated on its way out), the
  residual add and the biases in the epilogue of the conv that produces them.
- The transformer's keys and values sit in a ring per slot (position p in row p % 71), read in place by one
  attention kernel per layer that also writes the new keys (kernels/ring_attention.py).
- With `linear` (the engine's small_gemm, a small_gemm.FewRows), the transformer's projections of at most 16 rows
  (a call of 4 streams x 4 frames) take kernels/gemv.py: each RMSNorm's weight folded into the projection after
  it, whose launch scales by the rows' 1 / RMS; o and down added into the residual stream in place; gate|up and
  SiLU x up in one launch. Five launches a layer instead of nine.
- The RVQ output projections are folded into the codebooks (fp32 tables), LayerScale into o_proj/down_proj and
  ConvNeXt's gamma into pwconv2: the same maps, rounded once instead of twice.
bf16 keeps SnakeBeta, norms, softmax and all accumulation in fp32. CUDA for speed; the CPU runs the same kernels
in Triton's interpreter (tests only: slow).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ....kernels import causal_conv as conv_kernels
from ....kernels.causal_conv import ConvOptions, Snake, advance_state, causal_conv, conv_weight, convt_weight
from ....kernels.codec_norms import dwconv_layernorm, rms_norm
from ....kernels.ring_attention import ring_attention, rope_rows
from ....kernels.swiglu import swiglu
from ...slot_pool import SlotPool, SlotSpec
from ..model.layers import rope_inv_freq
from ..small_gemm import FewRows, swiglu_linear
from .codec import CodecDecoder, SnakeBeta
from .codec_state import StreamingCodec, shared_arange, state_layout


def fused_state_layout(codec: CodecDecoder, dtype: torch.dtype) -> dict[str, SlotSpec]:
    """codec_state.state_layout transposed for the kernels: conv windows [H, C], the KV ring [layers, 2, 71, HD]
    (same names, same number of values)."""
    layout = {}
    for name, spec in state_layout(codec, dtype).items():
        if name == "kv":
            layers, two, heads, window, dim = spec.shape
            layout[name] = SlotSpec((layers, two, window, heads * dim), spec.dtype)
        elif name == "frames":
            layout[name] = spec
        else:
            channels, hist = spec.shape
            layout[name] = SlotSpec((hist, channels), spec.dtype)
    return layout


def _snake(m: SnakeBeta, device: torch.device) -> Snake:
    """(exp(alpha), 1/(exp(beta)+1e-9)) in fp32, computed once as SnakeBeta.forward computes them per call."""
    return (m.alpha.detach().float().exp().to(device),
            (1.0 / (m.beta.detach().float().exp() + 1e-9)).to(device))


@dataclass
class _Conv:
    """One stateful conv of the step: GEMM weight, bias, taps/dilation, and its state's name."""

    w: torch.Tensor
    bias: torch.Tensor | None
    taps: int
    dilation: int = 1
    state: str | None = None


@dataclass
class _Unit:
    conv1: _Conv
    act2: Snake
    conv2: _Conv


@dataclass
class _Block:
    convt: _Conv
    stride: int
    units: list[_Unit]
    act_in: Snake  # the SnakeBeta before the transposed conv (applied by whatever produced the block's input)
    unit_acts: list[Snake]  # each unit's act1 (applied by the conv before it)


class FusedCodecStream(StreamingCodec):
    """Streams of one codec decoder on the fused kernels; state in a SlotPool of `num_slots` (slot 0 the sink).

    dtype: compute and state dtype (default: the codec's). The codec is read once to build the kernels' weight
    layouts and is left untouched. conv_options: how the conv kernels launch (kernels/causal_conv.ConvOptions;
    default: the measured defaults); attention_warps: warps per ring-attention program (4, measured). Both
    are plain attributes: the benchmark's variants reassign them between steps. linear: the transformer's
    projections through small_gemm's kernel (a FewRows; the norms are folded into the weights at build), or None
    for cuBLAS's F.linear.
    """

    max_step_frames = 64  # the attention kernel's limit; warm() splits longer references

    def __init__(self, codec: CodecDecoder, num_slots: int, dtype: torch.dtype | None = None,
                 conv_options: ConvOptions | None = None, attention_warps: int = 4,
                 linear: FewRows | None = None) -> None:
        p = next(codec.parameters())
        if not conv_kernels.runs_on(p.device):
            raise ValueError(f"FusedCodecStream runs Triton kernels, which need CUDA (a {p.device.type} codec was "
                             "given; the CPU works only in Triton's interpreter, for tests): use CodecStream there")
        self.dtype = dtype or p.dtype
        self.device = p.device
        self.conv_options, self.attention_warps = conv_options or ConvOptions(), attention_warps
        self.linear = linear
        self.cfg = cfg = codec.cfg
        self.samples_per_frame = cfg.samples_per_frame
        self.layout = fused_state_layout(codec, self.dtype)
        self.pool = SlotPool(self.layout, num_slots, self.device)
        self._build(codec)

    # -- weights ------------------------------------------------------------------------------------------------
    def _cast(self, t: torch.Tensor | None) -> torch.Tensor | None:
        return None if t is None else t.detach().to(self.dtype).contiguous()

    def _conv(self, conv: torch.nn.Conv1d, state: str | None) -> _Conv:
        return _Conv(conv_weight(conv.weight.detach()).to(self.dtype), self._cast(conv.bias), conv.kernel_size[0],
                     conv.dilation[0], state)

    @torch.no_grad()
    def _build(self, codec: CodecDecoder) -> None:
        cfg, dev, dt = self.cfg, self.device, self.dtype
        q = codec.quantizer
        projected = []  # each codebook through its group's output_proj (a 1x1 conv, linear): [size, codebook_dim]
        for group in (q.rvq_first, q.rvq_rest):
            w = group.output_proj.weight.detach().float()[:, :, 0]
            projected += [layer._codebook.table().detach().float() @ w.T for layer in group.vq.layers]
        self.codebook_size = cfg.codebook_size
        self.tables = torch.cat(projected)  # [Q * size, codebook_dim] fp32
        self.code_offsets = (shared_arange(len(projected), dev) * cfg.codebook_size).contiguous()
        self.pre_conv = self._conv(codec.pre_conv.conv, "pre_conv")
        tf = codec.pre_transformer
        self.in_proj = (self._cast(tf.input_proj.weight), self._cast(tf.input_proj.bias))
        self.out_proj = (self._cast(tf.output_proj.weight), self._cast(tf.output_proj.bias))
        self.final_norm = self._cast(tf.norm.weight)
        self.layers = [self._layer(layer) for layer in tf.layers]
        if self.linear is not None:  # a call too wide for the kernel: the folded q|k|v after a unit-weight norm
            self.unit_norm = torch.ones_like(self.final_norm)
        self.heads, self.head_dim = cfg.num_attention_heads, cfg.head_dim
        self.inv_freq = rope_inv_freq(cfg.head_dim, cfg.rope_theta, dev)
        self.upsample = []
        for i, (convt, block) in enumerate(codec.upsample):
            r = convt.conv.stride[0]
            w = convt.conv.weight.detach()  # [Cin, Cout, r], kernel == stride: output i*r + p = x[i] @ w[:, :, p]
            self.upsample.append(dict(
                rate=r, w=self._cast(w.permute(0, 2, 1).reshape(w.shape[0], -1)),
                bias=self._cast(convt.conv.bias.detach().repeat(r)),
                dw=self._cast(block.dwconv.conv.weight[:, 0]), dw_bias=self._cast(block.dwconv.conv.bias),
                dw_state=f"upsample.{i}.dwconv", ln=(self._cast(block.norm.weight), self._cast(block.norm.bias)),
                ln_eps=block.norm.eps, pw1=(self._cast(block.pwconv1.weight), self._cast(block.pwconv1.bias)),
                # x + gamma * pwconv2(h): gamma folded into pwconv2's rows and bias
                pw2_t=self._cast((block.gamma[:, None] * block.pwconv2.weight).T),
                pw2_bias=self._cast(block.gamma * block.pwconv2.bias),
            ))
        self.conv_in = self._conv(codec.decoder[0].conv, "decoder.0")
        self.blocks = []
        last = len(codec.decoder) - 1
        for b in range(1, last - 1):
            act, convt, *units = codec.decoder[b].block
            s = convt.conv.stride[0]
            self.blocks.append(_Block(
                convt=_Conv(convt_weight(convt.conv.weight.detach(), s).to(dt), self._cast(convt.conv.bias.repeat(s)),
                            2, 1, f"decoder.{b}.convt"),
                stride=s, act_in=_snake(act, dev), unit_acts=[_snake(u.act1, dev) for u in units],
                units=[_Unit(self._conv(u.conv1.conv, f"decoder.{b}.ru{j}"), _snake(u.act2, dev),
                             self._conv(u.conv2.conv, None)) for j, u in enumerate(units)],
            ))
        self.act_out = _snake(codec.decoder[-2], dev)
        self.conv_out = self._conv(codec.decoder[-1].conv, f"decoder.{last}")

    def _layer(self, layer: torch.nn.Module) -> dict[str, torch.Tensor]:
        """One transformer layer's weights: LayerScale folded into o_proj's and down_proj's rows; for `linear`, also
        each RMSNorm's weight into the columns of the projection after it, and o and down as [N, K]
        (kernels/gemv.py's layout) instead of transposed for addmm."""
        a, m = layer.self_attn, layer.mlp
        qkv = torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight])
        gate_up = torch.cat([m.gate_proj.weight, m.up_proj.weight])
        o = layer.self_attn_layer_scale.scale[:, None] * a.o_proj.weight
        down = layer.mlp_layer_scale.scale[:, None] * m.down_proj.weight
        if self.linear is None:
            return dict(norm1=self._cast(layer.input_layernorm.weight),
                        norm2=self._cast(layer.post_attention_layernorm.weight), qkv=self._cast(qkv),
                        o_t=self._cast(o.T), gate_up=self._cast(gate_up), down_t=self._cast(down.T))
        # folded in fp32 and rounded once, as the step's folded stacks are
        return dict(qkv=self._cast(qkv.float() * layer.input_layernorm.weight.float()),
                    o=self._cast(o),
                    gate_up=self._cast(gate_up.float() * layer.post_attention_layernorm.weight.float()),
                    down=self._cast(down))

    # -- decode -------------------------------------------------------------------------------------------------
    @torch.inference_mode()
    def step(self, slots: torch.Tensor, codes: torch.Tensor, num_frames: torch.Tensor) -> torch.Tensor:
        """As CodecStream.step: slots [B], codes [B, T, Q], num_frames [B] -> float32 audio [B, T * spf]; row b's
        first num_frames[b] * spf samples are real. No host sync: shapes depend on (B, T) only."""
        b, t, _ = codes.shape
        if t > self.max_step_frames:
            raise ValueError(f"a fused codec step takes at most {self.max_step_frames} new frames per row, got {t}")
        views = self.pool.views
        frames = views["frames"]
        n = num_frames
        x = self._quantize(codes)
        x = self._run(self.pre_conv, x, slots, n, 1)[0]
        pos0 = frames[slots, 0]  # frames decoded before this step (read before the count moves)
        x = self._transformer(x, slots, pos0, n)
        rate = 1
        for up in self.upsample:
            x = torch.addmm(up["bias"], x.view(-1, x.shape[-1]), up["w"]).view(b, -1, up["w"].shape[1] // up["rate"])
            rate *= up["rate"]
            state = views[up["dw_state"]]
            y = dwconv_layernorm(x, state, slots, up["dw"], up["dw_bias"], *up["ln"], up["ln_eps"])
            advance_state(x, state, slots, n, rate)
            h = F.gelu(F.linear(y, *up["pw1"]))
            x = torch.addmm(x.view(-1, x.shape[-1]), h.view(-1, h.shape[-1]), up["pw2_t"]).add_(up["pw2_bias"])
            x = x.view(b, -1, x.shape[-1])
        # decoder.0's output goes only through block 1's SnakeBeta: store it activated
        a = self._run(self.conv_in, x, slots, n, rate, snake_main=self.blocks[0].act_in)[0]
        for k, blk in enumerate(self.blocks):
            res, a = self._run(blk.convt, a, slots, n, rate, snake_out2=blk.unit_acts[0])
            rate *= blk.stride
            res, a = res.view(b, -1, res.shape[-1] // blk.stride), a.view(b, -1, a.shape[-1] // blk.stride)
            for j, unit in enumerate(blk.units):
                last = j == len(blk.units) - 1
                nxt = (self.blocks[k + 1].act_in if k + 1 < len(self.blocks) else self.act_out) if last \
                    else blk.unit_acts[j + 1]
                # the block's output itself is only read through the next SnakeBeta: not stored
                h = self._run(unit.conv1, a, slots, n, rate, snake_main=unit.act2)[0]
                res, a = self._run(unit.conv2, h, slots, n, rate, residual=res, snake_out2=nxt, store_main=not last)
        audio = self._run(self.conv_out, a, slots, n, rate, clamp=True, out_dtype=torch.float32)[0]
        frames.index_add_(0, slots, n[:, None])  # last: the transformer read the old count
        return audio.view(b, t * self.samples_per_frame)

    def _run(self, conv: _Conv, x: torch.Tensor, slots: torch.Tensor, n: torch.Tensor, rate: int, **epilogue,
             ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """One conv over x [B, L, Cin] continuing each slot's window, then the window moves to the row's end."""
        state = None if conv.state is None else self.pool.views[conv.state]
        out = causal_conv(x, conv.w, conv.taps, conv.dilation, state=state, slots=slots, bias=conv.bias,
                          options=self.conv_options, **epilogue)
        if state is not None:
            advance_state(x, state, slots, n, rate)
        return out

    def _quantize(self, codes: torch.Tensor) -> torch.Tensor:
        """codes [B, T, Q] -> [B, T, codebook_dim]: sum of the projected codebook rows (fp32), cast once."""
        codes = codes.clamp(min=0)
        # An out-of-range code would silently read the next codebook's table: fail instead (device-side).
        torch._assert_async(codes.max() < self.codebook_size)
        rows = F.embedding(codes + self.code_offsets, self.tables)  # [B, T, Q, dim]
        return rows.sum(2).to(self.dtype)

    def _transformer(self, x: torch.Tensor, slots: torch.Tensor, pos0: torch.Tensor, n: torch.Tensor,
                     ) -> torch.Tensor:
        """x [B, T, latent] -> [B, T, latent]; each layer's keys/values ring in the pool is read and advanced."""
        b, t, _ = x.shape
        cfg = self.cfg
        kv = self.pool.views["kv"]  # [slots, layers, 2, 71, HD]
        x = (self.linear or F.linear)(x.reshape(b * t, -1), *self.in_proj)
        eps = cfg.rms_norm_eps
        cos, sin = rope_rows(pos0, t, self.inv_freq, self.dtype)  # positions pos0 + 0..t-1, one launch
        if self.linear is not None:
            return self._folded_layers(x, cos, sin, kv, slots, pos0, n, eps).view(b, t, -1)
        for li, w in enumerate(self.layers):
            qkv = F.linear(rms_norm(x, w["norm1"], eps), w["qkv"]).view(b, t, -1)
            o = ring_attention(qkv, cos, sin, kv[:, li, 0], kv[:, li, 1], slots, pos0, n, self.heads, self.head_dim,
                               self.attention_warps)
            x = torch.addmm(x, o.view(b * t, -1), w["o_t"])
            gate, up = F.linear(rms_norm(x, w["norm2"], eps), w["gate_up"]).chunk(2, dim=-1)
            x = torch.addmm(x, F.silu(gate) * up, w["down_t"])
        x = F.linear(rms_norm(x, self.final_norm, eps), *self.out_proj)
        return x.view(b, t, -1)

    def _folded_layers(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, kv: torch.Tensor,
                       slots: torch.Tensor, pos0: torch.Tensor, n: torch.Tensor, eps: float) -> torch.Tensor:
        """The layers and output projection through `linear` on x [B * T, hidden] (the residual stream, added into
        in place): norms folded into the projections (see _layer); calls of more rows than the kernel takes run
        the same weights through F.linear after a unit-weight norm."""
        lin = self.linear
        b, t = cos.shape[:2]
        for li, w in enumerate(self.layers):
            if lin.takes(x, w["qkv"]):
                qkv = lin.normed(x, w["qkv"], eps)
            else:
                qkv = F.linear(rms_norm(x, self.unit_norm, eps), w["qkv"])
            o = ring_attention(qkv.view(b, t, -1), cos, sin, kv[:, li, 0], kv[:, li, 1], slots, pos0, n, self.heads,
                               self.head_dim, self.attention_warps)
            lin.add_(x, o.view(b * t, -1), w["o"])
            lin.add_(x, swiglu_linear(lin, swiglu, x, w["gate_up"], eps, scaled=True), w["down"])
        return lin(rms_norm(x, self.final_norm, eps), *self.out_proj)

"""ModelRunner: every GPU mechanic of the batched Qwen3-TTS engine in one place.

- The Talker's KV cache lives in a SlotPool ([layers, 2, kv_heads, positions, head_dim] per slot) and is read in
  place by the attention (kernels/slot_attention.py): never gathered or scattered. Slot 0 is the padding sink.
- A step (batch_step.py) is captured once per bucket (decode rows R, prefill tokens P): R rows make one frame each
  while up to `max_prefills` prompts ride along as extra Talker tokens (chunked when longer than P). Inputs cross
  in one host-to-device copy, the new frames come back in one device-to-host copy: the step's only sync.
- The codec decodes the frames of every stream due a chunk in one captured call (chunk_decoder.py), on a CUDA
  stream of its own so that it runs beside the next decode step.
On the CPU (tests, CI) the same buckets run eagerly (GraphSet's enforce_eager).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from ..graphs import GraphSet, smallest_bucket
from ..request import Request
from ..scheduler import StepPlan
from ..slot_pool import SlotPool, SlotSpec
from .batch_step import DecodeRows, SamplingFeatures, SlotState, StepModel, decode_frames, embed_rows
from .chunk_decoder import ChunkDecoder
from .depth_fused import DepthOps
from .fused_stack import DecoderOps
from .model.generate import Qwen3TTS
from .model.layers import rope_tables
from .model.prompt import PromptRows
from .model.sampling import NUM_PARAMS
from .options import DEFAULTS
from .slot_sizing import size_slots
from .step_buffers import HostCopy, PackedBuffer

RING = 64  # frames a stream may have made and not yet decoded (>= the widest codec piece)
CODEC_ROWS = (1, 8, 16, 32, 64)  # rows of the captured codec calls (each at the codec width)


def codec_buckets(width: int) -> tuple[tuple[int, int], ...]:
    """The codec calls captured for pieces of at most `width` frames per stream."""
    return tuple((rows, width) for rows in CODEC_ROWS)


def _text_id(trailing: list[int], frame: int, pad: int) -> int:
    """The text id added to the Talker input after frame `frame`: the stream's trailing text one id a frame, then
    tts_pad. (A stream whose text is still open never gets a row past its last id: Request.frames_ready.)"""
    return trailing[frame] if frame < len(trailing) else pad


@dataclass(slots=True)
class RunnerConfig:
    """The runner's part of the engine options; every default is Qwen3TTSOptions' (options.py)."""

    row_buckets: tuple[int, ...] = DEFAULTS.row_buckets
    prefill_buckets: tuple[int, ...] = DEFAULTS.prefill_buckets  # prompt tokens per step (a longer prompt spans steps)
    max_prefills: int = DEFAULTS.max_prefills  # prompts per step
    max_positions: int = DEFAULTS.max_positions  # prompt + frames per stream (KV positions per slot)
    max_slots: int | None = None  # streams + the sink; None: what kv_memory_fraction holds (slot_sizing.py)
    kv_memory_fraction: float = DEFAULTS.kv_memory_fraction  # of the GPU memory free after loading (CUDA)
    max_trailing: int = 1024  # text ids one stream feeds into decode steps (the one-token-per-frame layout)
    sampling: SamplingFeatures = field(default_factory=SamplingFeatures)  # what rows may ask of the sampler
    # Pieces of 4 frames: one 32 x 4 call decodes as many frames as 128 x 1 in less time (2.63 against 2.93 ms on
    # the H200), and rows of one width waste nothing on padding (docs/engine-loop.md, "Codec pieces").
    codec_width: int = DEFAULTS.codec_width
    codec_buckets: tuple[tuple[int, int], ...] | None = DEFAULTS.codec_buckets  # default: codec_buckets(width)
    attention: str = DEFAULTS.attention  # the fused step's kernels: triton | torch | auto (Triton on CUDA)
    # the depth loop's passes 1..14: "layers" as the Talker's, or "fused" in five launches a layer
    # (depth_fused.py). "layers" stays the default until the fused kernels are measured on a GPU: they are tested
    # against their references in Triton's interpreter only (docs/gpu-notes.md, issue 15).
    depth: str = DEFAULTS.depth
    draw: str = DEFAULTS.draw  # each codebook's draw: kernel (one launch) | torch | auto (kernel with depth=fused)
    codec: str = DEFAULTS.codec  # fused (Triton, CUDA) | reference (plain PyTorch) | auto (fused where it runs)
    enforce_eager: bool = DEFAULTS.enforce_eager
    progress: bool = True

    def __post_init__(self) -> None:
        if not self.row_buckets or min(self.row_buckets) < 1 or not self.prefill_buckets:
            raise ValueError("row_buckets and prefill_buckets need positive sizes")
        if self.codec_buckets is None:
            self.codec_buckets = codec_buckets(self.codec_width)
        if max(w for _, w in self.codec_buckets) > RING // 2:
            raise ValueError(f"codec pieces are at most {RING // 2} frames wide")
        if self.attention not in ("auto", "triton", "torch"):
            raise ValueError("attention must be auto, triton or torch")
        if self.depth not in ("fused", "layers"):
            raise ValueError("depth must be fused or layers")
        if self.draw not in ("auto", "kernel", "torch"):
            raise ValueError("draw must be auto, kernel or torch")
        if self.codec not in ("auto", "fused", "reference"):
            raise ValueError("codec must be auto, fused or reference")

    @property
    def max_rows(self) -> int:
        return max(self.row_buckets)


@dataclass
class _StepIO:
    ints: PackedBuffer
    floats: PackedBuffer | None
    logits: list[torch.Tensor] = field(default_factory=list)
    uploaded: torch.cuda.Event | None = None  # after the last copy of these inputs to the GPU (CUDA)


@dataclass
class Launched:
    """A launched step, for `finish`: its frames come back in `frames_host` once `done` has passed."""

    num_rows: int
    frames_host: HostCopy
    done: torch.cuda.Event | None  # after the step and the copy of its frames (CUDA)
    logits: list[torch.Tensor]  # a recording runner's (tests): this step's, codebook 0 then 1..15 (copies)


class ModelRunner:
    records_logits = False  # a test runner keeps each step's logits (tests/qwen3tts/teacher_forcing.py)

    def __init__(self, tts: Qwen3TTS, config: RunnerConfig | None = None, num_slots: int | None = None) -> None:
        self.tts = tts
        self.cfg = tts.cfg
        self.config = c = config or RunnerConfig()
        self.device = tts.device
        talker = tts.talker
        lc = self.cfg.talker.layers
        self.dtype = next(talker.parameters()).dtype
        self.eos_id = self.cfg.talker.codec_eos_token_id
        self.num_codes = self.cfg.talker.num_code_groups
        kv_layout = {"kv": SlotSpec((lc.num_hidden_layers, 2, lc.num_key_value_heads, c.max_positions, lc.head_dim),
                                    self.dtype)}
        codec_cls = self._codec_class()
        n = num_slots or self._slots_for_budget(kv_layout, codec_cls)
        self.kv = SlotPool(kv_layout, n, self.device, zero_on_allocate=False)
        self.codec = codec_cls(tts.codec, n)
        self.num_slots = n
        self.state = self._slot_state(n)
        suppress = torch.zeros(lc.vocab_size, dtype=torch.bool)
        suppress[lc.vocab_size - 1024:] = True  # language, control and speaker rows; EOS stays
        suppress[self.eos_id] = False
        self.suppress = suppress.to(self.device)
        self.ops = DecoderOps.for_device(self.device, c.attention)
        depth = DepthOps.for_triton(self.ops.uses_triton) if c.depth == "fused" else None
        self.model = StepModel(talker, self.ops, depth)
        if c.draw != "auto":  # auto: the draw kernel comes with depth=fused
            self.model.draw = DepthOps.for_triton(self.ops.uses_triton).draw if c.draw == "kernel" else None
        # Two frame buffers: with the loop pipelined, one step is read while the next is in flight.
        self._frames_host = [HostCopy((c.max_rows, self.num_codes), torch.int64, self.device) for _ in range(2)]
        self._launches = 0
        self.steps: GraphSet[tuple[int, int]] = GraphSet(self.device, c.enforce_eager)
        self.chunks = ChunkDecoder(self.codec, self.state.ring, c.codec_buckets, self.device, c.enforce_eager,
                                   c.progress)
        self._io: dict[tuple[int, int], _StepIO] = {}
        self.last_fill_s, self.last_bucket = 0.0, ""

    # -- construction -------------------------------------------------------------------------------------------
    def _codec_class(self) -> type:
        """The fused codec on CUDA (auto), the plain one elsewhere: Triton's CPU interpreter runs the fused kernels
        too, but only tests want that."""
        if self.config.codec == "fused" or (self.config.codec == "auto" and self.device.type == "cuda"):
            from .codec.codec_fused import FusedCodecStream

            return FusedCodecStream
        from .codec.codec_stream import CodecStream

        return CodecStream

    def _slots_for_budget(self, kv_layout: dict[str, SlotSpec], codec_cls: type) -> int:
        from ..slot_pool import slot_bytes
        from .codec.codec_state import state_layout

        c = self.config
        return size_slots(c.max_slots, slot_bytes(kv_layout), slot_bytes(state_layout(self.tts.codec, self.dtype)),
                          c.max_positions, c.kv_memory_fraction, self.device, c.progress)

    def _slot_state(self, n: int) -> SlotState:
        c, lc = self.config, self.cfg.talker.layers
        kv = self.kv["kv"]  # [S, L, 2, Hkv, P, D]
        cos, sin = rope_tables(torch.arange(c.max_positions, device=self.device), lc.head_dim, lc.rope_theta,
                               self.dtype)
        dev, h = self.device, lc.hidden_size
        return SlotState(
            k_cache=[kv[:, i, 0] for i in range(lc.num_hidden_layers)],
            v_cache=[kv[:, i, 1] for i in range(lc.num_hidden_layers)],
            cos=cos, sin=sin,
            hidden=torch.zeros(n, h, dtype=self.dtype, device=dev),
            seen=torch.zeros(n, lc.vocab_size, dtype=torch.bool, device=dev),
            params=torch.zeros(n, NUM_PARAMS, dtype=torch.float32, device=dev),
            x_vector=torch.zeros(n, h, dtype=self.dtype, device=dev),
            ring=torch.zeros(n, RING, self.num_codes, dtype=torch.int64, device=dev),
        )

    def capture(self) -> None:
        """Build (and on CUDA capture) every step and codec bucket: compiles, tunes, then records the graphs."""
        c = self.config
        keys = [(r, 0) for r in c.row_buckets] + [(r, p) for r in (0, *c.row_buckets) for p in c.prefill_buckets]
        self.chunks.capture()
        self.steps.capture(keys, self._make_step, size=lambda b: b[0] * 16 + b[1],
                           desc="decode-step graphs", progress=c.progress)

    # -- the step -------------------------------------------------------------------------------------------------
    def _make_step(self, key: tuple[int, int]) -> Callable[[], torch.Tensor]:
        rows, tokens = key
        c, q = self.config, self.num_codes
        np_ = c.max_prefills if tokens else 0
        ints = {"dec_slot": (rows,), "dec_pos": (rows,), "dec_frame": (rows,),
                "pre_slot": (tokens,), "pre_pos": (tokens,), "pre_text": (tokens,), "pre_codec": (tokens, q),
                "dec_text": (rows,), "done_idx": (np_,), "done_slot": (np_,), "new_slot": (np_,)}
        ints |= self._extra_inputs(rows)
        io = _StepIO(PackedBuffer(ints, torch.int64, self.device),
                     PackedBuffer({"new_params": (np_, NUM_PARAMS)}, torch.float32, self.device) if np_ else None)
        self._io[key] = io
        talker, state, d = self.tts.talker, self.state, io.ints.dev
        frames = torch.zeros(rows, q, dtype=torch.int64, device=self.device)

        @torch.inference_mode()
        def step() -> torch.Tensor:
            parts, slots, positions = [], [], []
            out_frames = frames
            if np_:
                assert io.floats is not None
                new = d["new_slot"]
                state.params.index_copy_(0, new, io.floats.dev["new_params"])
                state.seen.index_fill_(0, new, False)
            if rows:
                logits = io.logits if self.records_logits else None
                if logits is not None:
                    logits.clear()
                decode = self._decode_rows(d)
                out_frames, x = decode_frames(self.model, state, decode, self.eos_id, self.suppress, c.sampling,
                                              logits)
                parts.append(x)
                slots.append(d["dec_slot"])
                positions.append(d["dec_pos"])
            if tokens:
                parts.append(embed_rows(talker, d["pre_text"], d["pre_codec"], state.x_vector[d["pre_slot"]]))
                slots.append(d["pre_slot"])
                positions.append(d["pre_pos"])
            out = self.model.talker_tokens(torch.cat(parts), state, torch.cat(slots), torch.cat(positions))
            if rows:
                state.hidden.index_copy_(0, d["dec_slot"], out[:rows])
            if np_:
                state.hidden.index_copy_(0, d["done_slot"], out[rows + d["done_idx"]])
            return out_frames

        return step

    def run(self, plan: StepPlan) -> np.ndarray:
        """One step for the plan: a bool per decode row, True where it sampled end-of-speech."""
        return self.finish(self.launch(plan))

    def launch(self, plan: StepPlan) -> Launched:
        """Fill the plan's inputs (one copy to the GPU), replay its bucket's step and queue the copy of its frames
        back; `finish` waits for them. Frame indices are the streams' launched counts, so a step may be launched
        while the one before is still on the GPU."""
        t0 = time.perf_counter()
        c = self.config
        num_rows, num_tokens = len(plan.decodes), plan.num_prefill_tokens
        rows = smallest_bucket(c.row_buckets, num_rows) if num_rows else 0
        tokens = smallest_bucket(c.prefill_buckets, num_tokens) if num_tokens else 0
        key = (rows, tokens)
        io = self._io[key]
        if io.uploaded is not None and not io.uploaded.query():  # this bucket's last inputs not yet copied
            io.uploaded.synchronize()
        io.ints.clear()
        h = io.ints.host
        if num_rows:
            decodes = plan.decodes
            h["dec_slot"][:num_rows] = [r.slot for r in decodes]
            h["dec_frame"][:num_rows] = frame_index = [r.num_launched for r in decodes]
            h["dec_pos"][:num_rows] = np.asarray([r.num_prompt_tokens for r in decodes]) + frame_index
            pad = self.cfg.tts_pad_token_id  # the text id each row's next Talker input adds: trailing, then pad
            h["dec_text"][:num_rows] = [_text_id(r.prompt.trailing, r.num_launched, pad) for r in decodes]
            self._fill_decodes(decodes, h)
        if num_tokens:
            self._fill_prefills(plan, io, rows)
        io.ints.upload()
        if io.floats is not None:
            io.floats.upload()
        cuda = self.device.type == "cuda"
        if cuda:
            io.uploaded = torch.cuda.Event()
            io.uploaded.record()
        frames = self.steps(key)
        frames_host = self._frames_host[self._launches % 2]
        self._launches += 1
        if num_rows:
            frames_host.start(frames, num_rows)
        logits = [lg[:num_rows].clone() for lg in io.logits] if num_rows else []  # empty unless recording
        done = None
        if cuda:
            done = torch.cuda.Event()
            done.record()
        self.last_fill_s, self.last_bucket = time.perf_counter() - t0, f"{rows}+{tokens}"
        return Launched(num_rows, frames_host, done, logits)

    def finish(self, launched: Launched) -> np.ndarray:
        """Wait for a launched step: a bool per decode row, True where it sampled end-of-speech (no frame). The
        next codec call waits for this step on the GPU (it reads the frames the step stored), not for later ones."""
        if launched.done is not None:
            launched.done.synchronize()
        self.chunks.after = launched.done
        if not launched.num_rows:
            return np.zeros(0, dtype=bool)
        return launched.frames_host.array[: launched.num_rows, 0] == self.eos_id

    # Seams for a test runner (teacher forcing: tests/qwen3tts/teacher_forcing.py); the runtime adds nothing.
    def _extra_inputs(self, rows: int) -> dict[str, tuple[int, ...]]:
        """More int64 step inputs, by name and shape."""
        return {}

    def _decode_rows(self, d: dict[str, torch.Tensor]) -> DecodeRows:
        """The decode rows of a step from its device inputs."""
        return DecodeRows(d["dec_slot"], d["dec_pos"], d["dec_frame"], d["dec_text"])

    def _fill_decodes(self, decodes: list[Request], h: dict[str, np.ndarray]) -> None:
        """Fill the extra inputs of the decode rows (host views)."""

    def _fill_prefills(self, plan: StepPlan, io: _StepIO, rows: int) -> None:
        h = io.ints.host
        assert io.floats is not None
        params = io.floats.host["new_params"]
        params.fill(0)
        offset = 0
        for j, piece in enumerate(plan.prefills):
            request, start, count = piece.request, piece.start, piece.count
            prompt: PromptRows = request.prompt
            end = offset + count
            h["pre_slot"][offset:end] = request.slot
            h["pre_pos"][offset:end] = np.arange(start, start + count)
            h["pre_text"][offset:end] = prompt.text[start: start + count]
            h["pre_codec"][offset:end] = prompt.codec[start: start + count]
            if piece.completes:
                h["done_idx"][j], h["done_slot"][j] = end - 1, request.slot
            if start == 0:  # the stream's first piece: its per-slot state is set inside the step
                h["new_slot"][j] = request.slot
                params[j] = request.sampling
                if prompt.x_vector is not None:  # Base: the speaker row (rare, so one eager copy)
                    self.state.x_vector[request.slot] = prompt.x_vector.to(self.device, self.dtype)
            offset = end

    def memory(self) -> dict[str, float]:
        gib = 2**30
        return {"kv_slots_gib": self.kv.nbytes() / gib, "codec_slots_gib": self.codec.pool.nbytes() / gib,
                "slots": self.num_slots - 1, "kv_positions": self.config.max_positions,
                "kv_gib_per_slot": self.kv.slot_bytes / gib}


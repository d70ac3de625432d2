"""ModelRunner: every GPU mechanic of the batched Qwen3-TTS engine in one place.

- The Talker's KV cache lives in a SlotPool ([layers, 2, kv_heads, positions, head_dim] per slot) and is read in
  place by the attention (kernels/slot_attention.py): never gathered or scattered. Slot 0 is the padding sink.
- A step (batch_step.py) is captured once per bucket (decode rows R, prefill tokens P): the Talker runs over each
  decode row's pending input and up to `max_prefills` prompts' tokens (chunked when longer than P), then every
  decode row and every prompt the step completes samples a frame from its output, so a stream's first frame comes
  out of the step that completes its prompt. Inputs cross in one host-to-device copy, the new frames come back in
  one device-to-host copy: the step's only sync.
- The codec decodes the frames of every stream due a chunk in one captured call (chunk_decoder.py), on a CUDA
  stream of its own so that it runs beside the next decode step.
On the CPU (tests, CI) the same buckets run eagerly (GraphSet's enforce_eager).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import numpy as np
import torch

from ..gpu_timeline import GpuTimeline
from ..graphs import GraphSet, smallest_bucket
from ..request import Request
from ..scheduler import StepPlan
from ..slot_pool import SlotPool, SlotSpec
from .batch_step import SampledRows, SlotState, StepModel, embed_rows, projected_text, sample_frames
from .chunk_decoder import ChunkDecoder
from .depth_fused import DepthOps
from .fused_stack import DecoderOps
from .model.generate import Qwen3TTS
from .model.layers import rope_tables
from .model.prompt import PromptRows
from .model.sampling import NUM_PARAMS
from .runner_config import RING, RunnerConfig, text_id
from .slot_sizing import size_slots
from .small_gemm import linears, resolve
from .step_buffers import HostCopy, PackedBuffer

# RING and RunnerConfig (runner_config.py) are imported from here too: this module is the runner's public face.


@dataclass
class _StepIO:
    ints: PackedBuffer
    floats: PackedBuffer | None
    logits: list[torch.Tensor] = field(default_factory=list)
    uploaded: torch.cuda.Event | None = None  # after the last copy of these inputs to the GPU (CUDA)


@dataclass
class Launched:
    """A launched step, for `finish`: its frames come back in `frames_host` once `done` has passed."""

    rows: list[int]  # the step's output rows of its sampled rows, in the plan's order (StepPlan.sampled)
    frames_host: HostCopy
    done: torch.cuda.Event | None  # after the step and the copy of its frames (CUDA)
    logits: list[torch.Tensor]  # a recording runner's (tests): per sampled row, codebook 0 then 1..15 (copies)

    def frames(self) -> np.ndarray:
        """The frames [sampled rows, Q] once `done` has passed (EOS samples included)."""
        return self.frames_host.array[self.rows]


class ModelRunner:
    first_frame_with_prompt = True  # the step that completes a prompt samples its first frame (core.Runner)
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
        # the trailing text's rows projected once, before the slots take their share of the free memory
        table = c.text_table == "table" or (c.text_table == "auto" and self.device.type == "cuda")
        text_table = projected_text(talker) if table else None
        codec_cls = self._codec_class()
        n = num_slots or self._slots_for_budget(kv_layout, codec_cls)
        self.kv = SlotPool(kv_layout, n, self.device, zero_on_allocate=False)
        self.num_slots = n
        self.state = self._slot_state(n)
        suppress = torch.zeros(lc.vocab_size, dtype=torch.bool)
        suppress[lc.vocab_size - 1024:] = True  # language, control and speaker rows; EOS stays
        suppress[self.eos_id] = False
        self.suppress = suppress.to(self.device)
        self.ops = DecoderOps.for_device(self.device, c.attention, fuse_attention=c.fuse_attention)
        self.pdl = c.uses_pdl(self.device, self.ops.uses_triton)
        if self.pdl:
            self.ops = DecoderOps.for_device(self.device, c.attention, pdl=self.pdl, fuse_attention=c.fuse_attention)
        depth = DepthOps.for_triton(self.ops.uses_triton) if c.depth in ("fused", "persistent") else None
        self.small_gemm = resolve(c.small_gemm, self.device, self.ops.uses_triton)
        projections = linears(self.small_gemm, self.ops.uses_triton, self.pdl, c.gemv_rows, c.gemv_swiglu,
                              c.gemv_split or None, c.gemv_talker_rows, lanes=c.gemv_layout == "lanes")
        self.codec = codec_cls(tts.codec, n, **self._codec_kwargs())
        self.model = StepModel(talker, self.ops, depth, *projections,
                               persistent=c.depth == "persistent", fold_norms=c.folds_norms(self.dtype))
        # auto: the draw kernel wherever the step runs Triton (on the H200 it took 0.57-0.82 ms off every step:
        # docs/benchmarks/h200-step-profile), PyTorch's ops elsewhere (unless depth=fused or persistent brought the
        # kernel's own)
        if c.draw == "kernel" or (c.draw == "auto" and self.ops.uses_triton):
            draw = DepthOps.for_triton(self.ops.uses_triton).draw
            # with PDL the pass after a draw starts loading its weights while the rows draw (the draw would
            # otherwise be the one launch a depth pass that the next kernel waits out whole)
            self.model.draw = partial(draw, pdl=self.pdl) if self.pdl else draw
        elif c.draw == "torch":
            self.model.draw = None
        if c.epilogue == "kernel" or (c.epilogue == "auto" and self.ops.uses_triton):
            from ...kernels.frame_epilogue import frame_epilogue, frame_epilogue_ref

            # the reference's ops where the step runs none of Triton's (as the draw's `kernel` there)
            kernel = partial(frame_epilogue, pdl=self.pdl) if self.pdl else frame_epilogue
            self.model.epilogue = kernel if self.ops.uses_triton else frame_epilogue_ref
        self.model.text_table = text_table
        # Two frame buffers: with the loop pipelined, one step is read while the next is in flight.
        self._frames_host = [HostCopy((c.max_rows + c.max_prefills, self.num_codes), torch.int64, self.device)
                             for _ in range(2)]
        self._launches = 0
        self.steps: GraphSet[tuple[int, int]] = GraphSet(self.device, c.enforce_eager)
        self.chunks = ChunkDecoder(self.codec, self.state.ring, c.codec_buckets, self.device, c.enforce_eager,
                                   c.progress, sms=c.codec_sms, sms_rows=c.codec_sms_rows)
        self._io: dict[tuple[int, int], _StepIO] = {}
        self.last_fill_s, self.last_bucket = 0.0, ""
        self.timeline: GpuTimeline | None = None  # engine option gpu_timeline: set with `watch`

    def watch(self, timeline: GpuTimeline | None) -> None:
        """Record the steps' and codec calls' GPU spans into `timeline` while it is active (CUDA only)."""
        self.timeline = self.chunks.timeline = timeline if self.device.type == "cuda" else None

    # -- construction -------------------------------------------------------------------------------------------
    def _fused_codec(self) -> bool:
        """The fused codec on CUDA (auto), the plain one elsewhere: Triton's CPU interpreter runs the fused kernels
        too, but only tests want that."""
        return self.config.codec == "fused" or (self.config.codec == "auto" and self.device.type == "cuda")

    def _codec_class(self) -> type:
        if self._fused_codec():
            from .codec.codec_fused import FusedCodecStream

            return FusedCodecStream
        from .codec.codec_stream import CodecStream

        return CodecStream

    def _codec_kwargs(self) -> dict[str, object]:
        """The fused codec's transformer projections per `codec_gemm` (small_gemm's kernel, its FewRows, for gemv,
        with the step's PDL, or auto where small_gemm takes it; cuBLAS otherwise). The plain codec takes neither."""
        c = self.config
        if not self._fused_codec():
            return {}
        if c.codec_gemm == "gemv" and not self.ops.uses_triton:
            raise ValueError("codec_gemm=gemv needs the step's Triton kernels (attention=triton or auto on CUDA)")
        gemv = c.codec_gemm == "gemv" or (c.codec_gemm == "auto" and self.small_gemm != "cublas")
        if not (gemv and self.ops.uses_triton):
            return {}
        return {"linear": linears("gemv", True, self.pdl, split_above=c.gemv_split or None)[0]}

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
            next_input=torch.zeros(n, h, dtype=self.dtype, device=dev),
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
        n = rows + np_  # sampled rows: the decode rows, then one for each prompt the step may complete
        ints = {"dec_pos": (rows,), "pre_slot": (tokens,), "pre_pos": (tokens,), "pre_text": (tokens,),
                "pre_codec": (tokens, q), "done_idx": (np_,), "new_slot": (np_,),
                "row_slot": (n,), "row_frame": (n,), "row_text": (n,)}
        ints |= self._extra_inputs(n)
        io = _StepIO(PackedBuffer(ints, torch.int64, self.device),
                     PackedBuffer({"new_params": (np_, NUM_PARAMS)}, torch.float32, self.device) if np_ else None)
        self._io[key] = io
        talker, state, d = self.tts.talker, self.state, io.ints.dev

        @torch.inference_mode()
        def step() -> torch.Tensor:
            if np_:  # a new stream's sampling state, before any of its rows samples (one may complete here)
                assert io.floats is not None
                new = d["new_slot"]
                state.params.index_copy_(0, new, io.floats.dev["new_params"])
                state.seen.index_fill_(0, new, False)
            parts, slots, positions = [], [], []
            if rows:  # each decode row's input: its last frame's embedding + its text id (stored by its last step)
                dec_slot = d["row_slot"][:rows]
                parts.append(state.next_input[dec_slot])
                slots.append(dec_slot)
                positions.append(d["dec_pos"])
            if tokens:
                parts.append(embed_rows(talker, d["pre_text"], d["pre_codec"], state.x_vector[d["pre_slot"]]))
                slots.append(d["pre_slot"])
                positions.append(d["pre_pos"])
            # decode rows only: each its own slot (padding rows share slot 0, whose outputs nobody reads)
            out = self.model.talker_tokens(torch.cat(parts), state, torch.cat(slots), torch.cat(positions),
                                           scratch=True, one_per_slot=not tokens)
            hidden = torch.cat([out[:rows], out[rows + d["done_idx"]]]) if np_ else out  # a prompt's: its last token
            logits = io.logits if self.records_logits else None
            if logits is not None:
                logits.clear()
            return sample_frames(self.model, state, hidden, self._sampled_rows(d), self.eos_id, self.suppress,
                                 c.sampling, logits)

        return step

    def run(self, plan: StepPlan) -> np.ndarray:
        """One step for the plan: a bool per sampled row (StepPlan.sampled), True where it sampled end-of-speech."""
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
        sampled = plan.sampled
        # this step samples a completed prompt's first frame whatever the plan says: the plan must count it
        assert plan.first_frames or not any(p.completes for p in plan.prefills), "plan without first_frames"
        # decode rows first, then the completed prompts after the bucket's decode rows (padded rows: the sink)
        at = [*range(num_rows), *range(rows, rows + len(sampled) - num_rows)]
        if sampled:
            h["row_slot"][at] = [r.slot for r in sampled]
            h["row_frame"][at] = [r.num_launched for r in sampled]
            pad = self.cfg.tts_pad_token_id  # the text id each row's next Talker input adds: trailing, then pad
            h["row_text"][at] = [text_id(r.prompt.trailing, r.num_launched, pad) for r in sampled]
            self._fill_rows(sampled, at, h)
        if num_rows:  # frame f's row feeds frame f-1's input, at the position after the prompt's and f-1 frames'
            h["dec_pos"][:num_rows] = [r.num_prompt_tokens + r.num_launched - 1 for r in plan.decodes]
        if num_tokens:
            self._fill_prefills(plan, io)
        timeline = self.timeline if self.timeline is not None and self.timeline.active else None
        if timeline is not None:
            timeline.begin("step")
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
        if sampled:
            frames_host.start(frames, at[-1] + 1)
        if timeline is not None:
            timeline.end("step", f"{rows}+{tokens}")
        logits = [lg[at].clone() for lg in io.logits] if sampled else []  # empty unless recording
        done = None
        if cuda:
            done = torch.cuda.Event()
            done.record()
        self.last_fill_s, self.last_bucket = time.perf_counter() - t0, f"{rows}+{tokens}"
        return Launched(at, frames_host, done, logits)

    def finish(self, launched: Launched) -> np.ndarray:
        """Wait for a launched step: a bool per sampled row, True where it sampled end-of-speech (no frame). The
        next codec call waits for this step on the GPU (it reads the frames the step stored), not for later ones."""
        if launched.done is not None:
            launched.done.synchronize()
        self.chunks.after = launched.done
        if not launched.rows:
            return np.zeros(0, dtype=bool)
        return launched.frames()[:, 0] == self.eos_id

    # Seams for a test runner (teacher forcing: tests/qwen3tts/teacher_forcing.py); the runtime adds nothing.
    def _extra_inputs(self, rows: int) -> dict[str, tuple[int, ...]]:
        """More int64 step inputs, by name and shape, for a step of `rows` sampled rows."""
        return {}

    def _sampled_rows(self, d: dict[str, torch.Tensor]) -> SampledRows:
        """The sampled rows of a step from its device inputs."""
        return SampledRows(d["row_slot"], d["row_frame"], d["row_text"])

    def _fill_rows(self, sampled: list[Request], at: list[int], h: dict[str, np.ndarray]) -> None:
        """Fill the extra inputs of the sampled rows (host views): request i is row at[i]."""

    def _fill_prefills(self, plan: StepPlan, io: _StepIO) -> None:
        h = io.ints.host
        assert io.floats is not None
        params = io.floats.host["new_params"]
        params.fill(0)
        offset, completed = 0, 0
        for j, piece in enumerate(plan.prefills):
            request, start, count = piece.request, piece.start, piece.count
            prompt: PromptRows = request.prompt
            end = offset + count
            h["pre_slot"][offset:end] = request.slot
            h["pre_pos"][offset:end] = np.arange(start, start + count)
            h["pre_text"][offset:end] = prompt.text[start: start + count]
            h["pre_codec"][offset:end] = prompt.codec[start: start + count]
            if piece.completes:  # its first frame is sampled from its last token's output (row_* filled in launch)
                h["done_idx"][completed] = end - 1
                completed += 1
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


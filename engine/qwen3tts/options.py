"""The Qwen3-TTS engine's options (`--engine-option key=value`, a preset's `[engine_options]`): one field each, with
its type, default and help. The engine, the runner's and the scheduler's configs, `--help`, the docs tables and
configs/qwen3tts.toml all follow this class (tests/qwen3tts/test_options.py checks the docs and the preset)."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..aligner.call_profile import ProfileWindow
from ..config import EngineConfig, option, option_help, parse_options
from ..gpu_timeline import GpuTimeline

Buckets = tuple[tuple[int, int], ...]  # (rows, frames per row) of captured codec calls


@dataclasses.dataclass(frozen=True)
class Qwen3TTSOptions(EngineConfig):
    model: str = option("", "checkpoint directory or Hugging Face repo id (required)")
    device: str | None = option(None, "cuda, cuda:N or cpu (default: cuda when available)")
    dtype: str | None = option(None, "Talker dtype: bf16 (CUDA default), fp16, fp32 (CPU default)")
    codec_dtype: str | None = option(None, "codec dtype (default: the Talker's)")
    max_frames: int = option(2048, "hard cap on frames per stream (80 ms each; default 2048)")
    budget_factor: float = option(2.5, "frame budget = this x the text's expected frames (default 2.5), at least "
                                       "min_budget_s")
    min_budget_s: float = option(2.0, "the smallest frame budget, in seconds of audio (default 2)")
    chunk_frames: tuple[int, ...] = option((1, 2, 4, 8, 16), "codec chunk schedule in frames, e.g. 1,2,4,8,16 (the "
                                                             "last repeats)")
    codec_width: int = option(4, "frames per stream in one codec call: chunks are decoded in pieces this wide "
                                 "(default 4)")
    codec_buckets: Buckets | None = option(None, "captured codec calls as ROWSxFRAMES, e.g. 1x4,8x4,32x4 (default: "  # noqa: RUF009
                                                 "1,8,16,32,64 x codec_width)")
    codec_sms: int = option(0, "the codec's calls run on this many of the GPU's SMs only (a CUDA green context, "
                               "engine/sm_stream.py), so that the steps' small kernels do not wait behind its blocks: "
                               "32 made c = 8 2-3 % faster on an H100 and c = 128 38 % slower (its wide calls "
                               "~3x slower there); 0: every SM (default; ignored off CUDA)")
    codec_sms_rows: int = option(0, "with codec_sms: only codec calls of at most this many rows run on its SMs, "
                                    "wider ones on every SM (their graphs captured on both; 0: every call); 8 "
                                    "kept c = 8's gain and c = 1's and c = 128's speed on an H100")
    ref_audio: str | None = option(None, "Base: a 16-bit WAV whose x-vector is the `clone` voice")
    greedy: bool = option(False, "true: greedy decoding (no sampling)")
    warmup: bool = option(True, "false: skip the warm-up stream at start")
    max_slots: str = option("auto", "streams held at once, plus one: auto (default: kv_memory_fraction of the free "
                                    "GPU memory over the KV a slot; 17 on the CPU) or a number (fewer if memory is "
                                    "short)")
    max_positions: int = option(2560, "KV positions per stream: prompt + frames (default 2560)")
    kv_memory_fraction: float = option(0.6, "share of free GPU memory for stream slots (default 0.6)")
    attention: str = option("auto", "triton | torch | auto")
    depth: str = option("layers", "the depth loop's passes 1..14: layers (as the Talker's, default) | fused (five "
                                  "launches a layer; exact, but measured no faster on the H200) | persistent (one "
                                  "launch a pass for buckets of <= 16 rows, layers above; exact, but measured "
                                  "slower at 8-16 rows on the H200)")
    draw: str = option("auto", "each codebook's draw: kernel (one launch a codebook, kernels/sample_draw.py; rows "
                               "needing top-p keep PyTorch's ops) | torch | auto (the kernel where the step runs "
                               "Triton)")
    epilogue: str = option("auto", "a step's last writes (each row's ring entry and its stream's next Talker "
                                   "input): kernel (one launch, kernels/frame_epilogue.py) | torch (ten launches) | "
                                   "auto (the kernel where the step runs Triton)")
    text_table: str = option("auto", "the trailing text's Talker input: table (every text id projected once at "
                                     "load, a step looks its rows up: the projection MLP's three launches fewer; "
                                     "1.7B: 594 MiB of GPU memory) | mlp (projected every step) | auto (table on "
                                     "CUDA)")
    small_gemm: str = option("auto", "projections of <= 16 rows: auto (default: gemv_all on a Hopper GPU where the "
                                     "step runs Triton, cublas elsewhere) | cublas (F.linear) | gemv (the code "
                                     "predictor's through kernels/gemv.py, a whole weight tile a program) | gemv_all "
                                     "(the Talker's too)")
    gemv_rows: int = option(16, "small_gemm = gemv or gemv_all: the code predictor's projections of at most this "
                                "many rows (1-16) take kernels/gemv.py where it fits (the Talker's: 1 row). Default "
                                "16: 2-16 rows through its MMA rows kernel (c = 8 118.9 against 116.4 audio-s/s with "
                                "1 on an H100); 1: cuBLAS above one row")
    gemv_talker_rows: int = option(1, "small_gemm = gemv_all: the Talker's projections of at most this many rows "
                                      "(1-16) take kernels/gemv.py where it fits. Default 1: at 8 rows its q|k|v "
                                      "and gate|up read slower through the rows kernel than cuBLAS (H100)")
    gemv_split: int = option(16384, "small_gemm's rows kernel (2-16 rows): K cut across programs where a "
                                    "program's whole rows would hold more than this many weight values (a power "
                                    "of two; split-K, the parts' fp32 sums added in order: the same bits every "
                                    "run). Default 16384: the code predictor's o and down in 2 and 3 parts, 8- and "
                                    "16-row steps 0.26-0.29 ms faster on an H100; 0: kernels/gemv.py's own rule, "
                                    "which splits nothing")
    gemv_layout: str = option("lanes", "small_gemm's kernel for the code predictor's one-row projections: lanes "
                                       "(default: each warp a column's whole row across its 32 lanes, every row's "
                                       "sum within a warp; on an H100 the 1-row step 3.26 -> 3.10 ms, c = 1 23.55 "
                                       "-> 24.44 audio-s/s) | tiles (a program's whole tile of W spread over its "
                                       "warps). 2-16 rows and the Talker's keep their kernels")
    gemv_swiglu: bool = option(True, "small_gemm = gemv or gemv_all: gate|up and SwiGLU in one kernels/gemv.py "
                                     "launch where the kernel takes the projection (default true; false: the "
                                     "projection, then kernels/swiglu.py)")
    codec_gemm: str = option("cublas", "the codec transformer's projections: cublas (default: F.linear) | gemv "
                                       "(calls of <= 16 rows, 4 streams x 4 frames, through kernels/gemv.py, each "
                                       "norm folded into the projection after it: five launches a layer instead of "
                                       "nine; CUDA, or attention=triton; a 1 x 4 call 12 % faster on an H100, no "
                                       "throughput gained at c = 1 or 8) | auto (gemv where small_gemm takes the "
                                       "kernel)")
    pdl: str = option("auto", "programmatic dependent launch (Hopper) for the step's Triton kernels (the stacks' "
                             "q/k norm, attention, SwiGLU and final norm, kernels/gemv.py's projections, the "
                             "draws and the frame epilogue): each may start before the kernel ahead ends, a "
                             "projection loading its weights first: on "
                             "(each lets the next start before it waits) | late (only once it has waited: one "
                             "kernel ahead) | off | auto (default: on where the GPU and Triton have it "
                             "and a probe launch with it runs at start)")
    fold_norms: bool = option(True, "the Talker's and the code predictor's layer norms folded into the "
                                    "projections they feed: 7 launches a layer instead of 9, the same function "
                                    "(engine/qwen3tts/fused_stack.py; default true: 5-7 % off every step on an "
                                    "H100; never in fp16, whose range the unnormalized projections could pass; "
                                    "false: the norms as loaded)")
    fuse_attention: bool = option(True, "a layer's q/k norm, RoPE and key/value write and its attention in one "
                                        "launch wherever each token of the call is the only one of its slot "
                                        "(decode steps without a prompt, the depth loop's passes 1..14; "
                                        "kernels/cp_attend.py): one launch a layer fewer, 98 a 1.7B step. Default "
                                        "true: every step bucket 0.03-0.18 ms faster on an H100; false: two "
                                        "launches")
    codec: str = option("auto", "fused (Triton kernels, CUDA) | reference (plain PyTorch) | auto")
    text_min_tokens: int = option(4, "a stream whose text is still arriving starts after this many text tokens "
                                     "(default 4)")
    gpu_timeline: str | None = option(None, "DIR:START:COUNT: CUDA events around COUNT steps after the first START "
                                            "and their codec calls, with the worker's stages, into timeline.md and "
                                            "timeline.json in the folder DIR: how busy the GPU is in the loop "
                                            "(engine/gpu_timeline.py; default off)")
    aligner: str | None = option(None, "Qwen3-ForcedAligner checkpoint directory or Hugging Face repo id: measured "
                                       "word times for sessions that ask (loaded on the engine's device and dtype; "
                                       "default none: no word times)")
    aligner_group_ms: int = option(1000, "word times held: a sentence's audio is aligned in pieces while it is "
                                         "made, one more call each time this much more audio is made (while the "
                                         "listener is less than two groups ahead), and released up to the last "
                                         "word measured (engine/aligner/stream.py; default 1000; 0: aligned whole "
                                         "once the sentence is made, its audio held until then)")
    aligner_not_held_group_ms: int = option(0, "word times not held: the same for a stream whose audio goes out "
                                               "as it is made (default 0: the sentence aligned whole, one call once "
                                               "it is made; measured on an H100 with aligner_gather_ms = 120: "
                                               "sentence capacity 300 req/s against 270 in pieces of 1000, the "
                                               "aligner's time per s of speech 44 % lower: docs/aligner.md)")
    aligner_margin_ms: int = option(240, "word times: a word timed in a piece is kept only if it ends this long "
                                         "before the piece's end, where the cut may blur the aligner's times "
                                         "(default 240; the rest wait for the next piece)")
    aligner_graphs: bool = option(True, "the aligner's packed decoder replayed from CUDA graphs "
                                        "(engine/aligner/decoder_graphs.py; default true, measured faster on the "
                                        "H200; false: eager; off CUDA the decoder runs eagerly either way)")
    aligner_encoder_graphs: bool = option(True, "the aligner's audio encoder replayed from CUDA graphs "
                                                "(engine/aligner/encoder_graphs.py; default true, measured faster on "
                                                "the H200; false: eager; off CUDA the encoder runs eagerly either "
                                                "way)")
    aligner_max_batch: int = option(64, "word times: clips the aligner measures in one call at most, and with its "
                                        "graphs on no more clips and seconds than they hold (the rest wait for "
                                        "the next call; engine/aligner/worker.py; default 64)")
    aligner_graph_clips: int = option(64, "word times: the aligner's decoder graphs hold calls of up to this many "
                                          "clips, and the aligner's calls take no more (~45 MB of GPU memory a clip; "
                                          "engine/aligner/decoder_graphs.py; default 64)")
    aligner_graph_chunks: int = option(256, "word times: the aligner's encoder graphs hold calls of up to this many "
                                            "seconds of audio, a power of two, and the aligner's calls take no more "
                                            "(engine/aligner/encoder_graphs.py; default 256)")
    aligner_graph_steps: int = option(4, "word times: the aligner's graphs per octave of tokens and of chunks, a "
                                         "power of two up to 8: a call pads to at most 1 + 1/steps of its size "
                                         "(engine/graphs.py bucket_ladder; default 4; 1: powers of two)")
    aligner_prefill_attention: bool = option(True, "word times: the aligner's decoder attends a block of a clip's "
                                                   "tokens at a time (kernels/prefill_attention.py; CUDA) instead "
                                                   "of a token at a time (default true; ignored off CUDA)")
    aligner_priority: str = option("normal", "word times: the aligner's CUDA stream at normal priority (the "
                                             "loop's) or high (the device's highest: its kernels' blocks start "
                                             "before the loop's; engine/aligner/worker.py; default normal)")
    aligner_gather_ms: int = option(120, "word times not held: an aligner call of such streams' clips waits up "
                                         "to this long after its oldest clip came for more while other such "
                                         "streams are making audio (a held stream's clip, a full call, or no "
                                         "stream left to bring one, starts it at once): fewer, fuller calls, "
                                         "words later "
                                         "(engine/aligner/worker.py; default 120; 0: a call starts as soon as the "
                                         "aligner is free; 240 measured no better on an H100)")
    aligner_profile: str | None = option(None, "PATH:FIRST:COUNT: torch's profiler around COUNT aligner calls from "
                                               "call FIRST, their operations' CPU time by thread and the "
                                               "allocators' counters written to PATH: what a call's host time goes "
                                               "to in the loop (engine/aligner/call_profile.py; the loop slows "
                                               "while it runs, and in one open-loop run at 270 req/s it stayed "
                                               "broken after: a diagnostic server, restarted after; default off)")

    def __post_init__(self) -> None:
        if self.max_frames <= 0 or not self.chunk_frames or min(self.chunk_frames) <= 0:
            raise ValueError("max_frames and chunk_frames must be positive")
        if self.codec_sms < 0 or self.codec_sms_rows < 0:
            raise ValueError("codec_sms and codec_sms_rows must be >= 0")
        if not 1 <= self.codec_width <= 32:
            raise ValueError("codec_width must be 1 to 32 frames")
        if not self.rows:
            raise ValueError("max_rows must be at least the smallest row bucket")
        if min(self.aligner_group_ms, self.aligner_not_held_group_ms, self.aligner_margin_ms,
               self.aligner_gather_ms) < 0:
            raise ValueError("aligner_group_ms, aligner_not_held_group_ms, aligner_margin_ms and aligner_gather_ms "
                             "must be >= 0")
        if min(self.aligner_max_batch, self.aligner_graph_clips) < 1:
            raise ValueError("aligner_max_batch and aligner_graph_clips must be at least 1")
        if self.aligner_graph_chunks < 1 or self.aligner_graph_chunks & (self.aligner_graph_chunks - 1):
            raise ValueError(f"aligner_graph_chunks must be a power of two, not {self.aligner_graph_chunks}")
        if self.aligner_graph_steps not in (1, 2, 4, 8):
            raise ValueError(f"aligner_graph_steps must be 1, 2, 4 or 8, not {self.aligner_graph_steps}")
        if self.aligner_priority not in ("normal", "high"):
            raise ValueError(f"aligner_priority must be normal or high, not {self.aligner_priority!r}")
        if self.text_min_tokens < 1:
            raise ValueError("text_min_tokens must be at least 1")
        GpuTimeline.parse(self.gpu_timeline)  # a bad window is refused here, not after the model has loaded
        ProfileWindow.parse(self.aligner_profile)
        if self.max_slots != "auto" and not (self.max_slots.isdigit() and int(self.max_slots) >= 2):
            raise ValueError(f"max_slots must be auto or a number >= 2 (one slot is the padding sink), not "
                             f"{self.max_slots!r}")

    @property
    def aligner_worker(self) -> dict[str, Any]:
        """The aligner options as AlignerWorker's arguments (engine/aligner/worker.py)."""
        return dict(graphs=self.aligner_graphs, encoder_graphs=self.aligner_encoder_graphs,
                    max_batch=self.aligner_max_batch, graph_clips=self.aligner_graph_clips,
                    graph_chunks=self.aligner_graph_chunks, graph_steps=self.aligner_graph_steps,
                    prefill_attention=self.aligner_prefill_attention, priority=self.aligner_priority,
                    profile=self.aligner_profile, gather_s=self.aligner_gather_ms / 1000)

    @property
    def slots(self) -> int | None:
        """max_slots as a number, None for auto."""
        return None if self.max_slots == "auto" else int(self.max_slots)

    @property
    def rows(self) -> tuple[int, ...]:
        """The row buckets captured: those up to max_rows."""
        return tuple(b for b in self.row_buckets if b <= self.max_rows)

    def runner_options(self) -> dict[str, Any]:
        """RunnerConfig's keyword arguments (all but `sampling`, which comes from the checkpoint)."""
        return dict(row_buckets=self.rows, prefill_buckets=self.prefill_buckets, max_prefills=self.max_prefills,
                    max_slots=self.slots, max_positions=self.max_positions,
                    kv_memory_fraction=self.kv_memory_fraction, enforce_eager=self.enforce_eager,
                    attention=self.attention, depth=self.depth, draw=self.draw, epilogue=self.epilogue,
                    text_table=self.text_table, small_gemm=self.small_gemm,
                    gemv_rows=self.gemv_rows, gemv_talker_rows=self.gemv_talker_rows, gemv_split=self.gemv_split,
                    gemv_layout=self.gemv_layout,
                    gemv_swiglu=self.gemv_swiglu, codec_gemm=self.codec_gemm, pdl=self.pdl, fold_norms=self.fold_norms,
                    fuse_attention=self.fuse_attention,
                    codec=self.codec, codec_width=self.codec_width, codec_buckets=self.codec_buckets,
                    codec_sms=self.codec_sms, codec_sms_rows=self.codec_sms_rows)


OPTIONS = option_help(Qwen3TTSOptions)  # name -> help, in field order
DEFAULTS = Qwen3TTSOptions()


def parse(options: dict[str, Any]) -> Qwen3TTSOptions:
    """The options from `key: value` pairs (strings from the command line, typed values from TOML)."""
    try:
        return parse_options(Qwen3TTSOptions, options)
    except ValueError as exc:
        if str(exc).startswith("unknown option"):
            raise ValueError(f"unknown qwen3tts engine {str(exc).removeprefix('unknown ')}") from None
        raise

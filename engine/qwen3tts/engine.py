"""The Qwen3-TTS adapter behind `voxgate.engine.base.Engine`: voices, prompt checks, and the wiring of the batched
engine loop (engine/loop.py -> core.py -> scheduler.py, with qwen3tts/runner.py doing the GPU work).

Every request becomes one stream of the loop: a slot of Talker KV cache and codec state, one row of each step
while it generates, and chunks of PCM16 as its codec chunks come due. On CUDA the steps replay CUDA graphs; on
the CPU the same loop runs eagerly (tests and CI drive gateway -> loop -> codec end to end on a tiny checkpoint).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from typing import Any

from ..admission import Forecast, LoopForecaster
from ..base import SAMPLE_RATE, AudioStream, Engine, EngineError, SynthesisRequest, VoiceInfo
from ..core import EngineCore, StepOutput
from ..gpu_timeline import GpuTimeline
from ..loop import EngineLoop, LoopStream
from ..request import FRAME_S, Request
from ..scheduler import SchedulerConfig
from .engine_info import describe
from .options import Qwen3TTSOptions, parse
from .speakers import ISO_LANGUAGES, NATIVE, default_speaker, native_speaker
from .text_stream import StreamedText

FRAME_MS = 80  # 12.5 Hz
DESIGN_VOICE = "design"  # VoiceDesign: the request's instruct describes the voice
CLONE_VOICE = "clone"  # Base: the x-vector of the `ref_audio` option

class Qwen3TTSEngine(Engine):
    name = "qwen3tts"

    def __init__(self, options: Qwen3TTSOptions) -> None:
        self.options = o = options
        self.chunk_schedule = o.chunk_frames
        self.max_frames, self.budget_factor, self.min_budget_s = o.max_frames, o.budget_factor, o.min_budget_s
        self.model_path, self.device, self.dtype, self.codec_dtype = o.model, o.device, o.dtype, o.codec_dtype
        self.ref_audio = o.ref_audio
        self.greedy, self.warmup = o.greedy, o.warmup
        self.loop_options: dict[str, Any] = o.runner_options()
        self.scheduler_config = SchedulerConfig.of(o)
        self.gil_switch_s = o.gil_switch_ms / 1000 or None
        self.pipeline = o.pipeline
        self.text_min_tokens = o.text_min_tokens
        self.aligner_path = o.aligner or None
        self.timeline: GpuTimeline | None = None  # engine option gpu_timeline
        self.word_aligner: Any = None  # an AlignerWorker (engine/aligner/worker.py) when `aligner` is set
        self.supports_word_times = self.aligner_path is not None  # measured by it (engine/aligner/stream.py)
        self.tts: Any = None
        self.runner: Any = None
        self.loop: EngineLoop | None = None
        self.joining = 0  # streamed-text streams waiting for their first text (text_stream.py)
        self.metrics: Any = None
        self._registry: Any = None
        self._voice_kwargs: dict[str, Any] = {}
        self._uploaded: dict[str, Any] = {}  # voice id -> Voice (POST /v1/voices; add_voice)
        self._param_row: list[float] = []
        self._ready = False
        self.timings: dict[str, float] = {}

    # -- lifecycle -----------------------------------------------------------------------------------------------
    def _load(self) -> None:
        """Worker thread: load, size the slots, compile and capture, warm up (each with progress output)."""
        import torch

        from ..metrics import EngineMetrics
        from .batch_step import SamplingFeatures
        from .model.checkpoint import load_config, resolve
        from .model.generate import Qwen3TTS, Voice
        from .model.sampling import param_row
        from .runner import RING, ModelRunner, RunnerConfig
        from .tools.wav import read_wav

        t0 = time.perf_counter()
        device = self.device or ("cuda" if torch.cuda.is_available() else "cpu")
        if device.startswith("cuda") and not torch.cuda.is_available():  # before any download or load
            raise ValueError(f"device {device!r}, but torch {torch.__version__} sees no CUDA GPU here: run on a GPU "
                             "machine, or pass --engine-option device=cpu (slow: for a tiny checkpoint)")
        dtype = self.dtype or ("bf16" if device.startswith("cuda") else "fp32")
        # The codec encoder serves voice uploads, which only Base takes: elsewhere it is not loaded (~56 M
        # parameters, 225 MB in fp32).
        base = load_config(resolve(self.model_path)).tts_model_type == "base"
        self.tts = tts = Qwen3TTS.from_pretrained(self.model_path, device=device, dtype=dtype,
                                                  codec_dtype=self.codec_dtype or dtype,
                                                  with_encoder=None if base else False)
        if self.aligner_path:  # on the Talker's device and dtype, its own thread beside the loop
            from ..aligner.worker import AlignerWorker

            self.word_aligner = AlignerWorker.load(self.aligner_path, tts.device, next(tts.talker.parameters()).dtype,
                                                   self._registry, **self.options.aligner_worker)
        if device == "cpu":
            torch.set_num_threads(1)  # tiny CPU steps: OpenMP threads only fight the event loop for the cores
        t1 = time.perf_counter()
        gen = tts.cfg.generation.greedy() if self.greedy else tts.cfg.generation
        self._param_row = param_row(gen)
        config = RunnerConfig(sampling=SamplingFeatures.of(gen), **self.loop_options)
        self.runner = runner = ModelRunner(tts, config)
        runner.capture()
        self.timeline = GpuTimeline.parse(self.options.gpu_timeline)
        runner.watch(self.timeline)
        t2 = time.perf_counter()
        if tts.cfg.tts_model_type == "base" and self.ref_audio:
            audio, sr = read_wav(self.ref_audio)
            self._voice_kwargs[CLONE_VOICE] = Voice(x_vector=tts.speaker_embedding(audio, sr))
        self.metrics = EngineMetrics(self._registry)
        # A stream never runs further ahead of its codec than the frame ring holds (plus the piece in flight).
        self.scheduler_config.max_pending_frames = RING - runner.chunks.max_width
        o = self.options  # the forecaster learns this loop's step times (engine/admission.py)
        core = EngineCore(runner, runner.kv, self.scheduler_config, o.pipeline, o.early_first_chunk,
                          o.pipeline_min_rows, o.codec_fill, o.early_end)
        forecaster = LoopForecaster(o.rows, o.max_prefills, self.chunk_schedule[0], runner.kv.max_streams, o.pipeline,
                                    pipeline_min_rows=o.pipeline_min_rows)
        self.loop = EngineLoop(core, "qwen3tts", self._on_step, self.gil_switch_s, forecaster)
        self.timings = {"load_s": t1 - t0, "capture_s": t2 - t1}

    def _on_step(self, out: StepOutput, seconds: float) -> None:
        if self.timeline is not None:
            self.timeline.after_step(out)
        if self.metrics is not None and out.bucket:
            self.metrics.observe(out, out.bucket, seconds)

    async def start(self) -> None:
        started = time.perf_counter()
        await asyncio.get_running_loop().run_in_executor(None, self._load)
        assert self.loop is not None
        self.loop.start()
        self._ready = True
        if self.warmup and self.voices():
            t0 = time.perf_counter()
            voice = self.voices()[0].id
            stream = self.open_stream(SynthesisRequest(text="Warm up.", voice=voice, instruct="A calm voice.",
                                                       max_audio_ms=4 * FRAME_MS))
            async for _ in stream:
                pass
            self.timings["warmup_s"] = time.perf_counter() - t0
        self.timings["cold_start_s"] = time.perf_counter() - started

    async def stop(self) -> None:
        self._ready = False
        if self.loop is not None:
            await self.loop.stop()
        if self.word_aligner is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.word_aligner.close)

    @property
    def ready(self) -> bool:
        return self._ready

    def register_metrics(self, registry: Any) -> None:
        self._registry = registry

    def info(self) -> dict[str, Any]:
        return describe(self)

    @property
    def queue_depth(self) -> int:
        return self.loop.queue_depth if self.loop is not None else 0

    def admission_forecast(self, queued: int = 0) -> Forecast | None:
        """From the loop's step times and slots; streams still waiting for their first text count ahead."""
        return self.loop.forecast(queued + self.joining) if self.loop is not None and self._ready else None

    @property
    def free_rows(self) -> int:
        """Free KV slots: each holds one stream (0 until the slots exist)."""
        return self.runner.kv.num_free if self.runner is not None else 0

    @property
    def supports_instruct(self) -> bool:  # type: ignore[override]
        """The 0.6B CustomVoice and Base checkpoints ignore instruct (as the reference does): the gateway warns."""
        return self.tts is not None and self.tts.cfg.supports_instruct

    @property
    def requires_instruct(self) -> bool:  # type: ignore[override]
        """VoiceDesign: the instruct is the voice."""
        return self.tts is not None and self.tts.cfg.tts_model_type == "voice_design"

    # Text may arrive while a stream runs (the streaming-text layout: one text token a frame; text_stream.py).
    supports_text_streaming = True
    word_times_by_sentence = True  # the aligner times a sentence, whole or in pieces of it (engine/aligner/stream.py)

    def word_times_unavailable(self) -> str:  # a text token's frame is no word's time: the Talker reads ahead
        return "qwen3tts measures word times with a forced aligner (engine option `aligner`), and none is configured"

    def voices(self) -> list[VoiceInfo]:
        if self.tts is None:
            return []
        kind = self.tts.cfg.tts_model_type
        if kind == "custom_voice":
            return [VoiceInfo(s, s.replace("_", " ").title(), (NATIVE.get(s, "zh"),)) for s in self.tts.cfg.speakers]
        if kind == "voice_design":
            return [VoiceInfo(DESIGN_VOICE, "Designed voice", (), description="described by the request's instruct")]
        if CLONE_VOICE in self._voice_kwargs:
            return [VoiceInfo(CLONE_VOICE, "Cloned voice", (), description=f"x-vector of {self.ref_audio}")]
        return []

    def default_voice(self) -> str | None:
        """On CustomVoice the English speaker (Ryan, else Aiden): /v1/voices' `default`, what the demo starts on."""
        return default_speaker([v.id for v in self.voices()])

    def language_for(self, tag: str, name: str) -> str | None:
        """Qwen3-TTS names its languages in English (`english`); dialects are reached through their speakers."""
        return name if self.tts is not None and name in self.tts.cfg.languages else None

    # -- uploaded voices (POST /v1/voices) -------------------------------------------------------------------------
    @property
    def supports_voice_upload(self) -> bool:  # type: ignore[override]
        """Base checkpoints clone a voice from a recording (x-vector, and with a transcript the reference codes)."""
        return self.tts is not None and self.tts.cfg.tts_model_type == "base"

    def voice_prompt(self, audio: Any, sample_rate: int, ref_text: str | None) -> dict[str, Any]:
        """`Qwen3TTS.clone_voice` as arrays: x_vector [H] float32; in context also ref_codes [T_ref, 16] int64 and
        ref_ids (the transcript's prompt ids). Runs beside the loop (speaker and codec encoders only)."""
        import numpy as np
        import torch

        from .model.prompt import PromptError, reference_ids

        if not self.supports_voice_upload:
            raise EngineError("unsupported", "only Base checkpoints take uploaded voices")
        try:  # refused before the encoders run, rather than at every request of the voice
            ref_ids = reference_ids(self.tts.tokenizer, ref_text, len(audio) / sample_rate) if ref_text else []
        except PromptError as exc:
            raise EngineError("ref_text_too_long", str(exc)) from None
        # On CUDA, a side stream: work on the legacy default stream would wait for the loop's steps and hold them.
        side = torch.cuda.Stream(self.tts.device) if self.tts.device.type == "cuda" else None
        with torch.inference_mode(), torch.cuda.stream(side) if side is not None else contextlib.nullcontext():
            voice = self.tts.clone_voice(audio, sample_rate, ref_text)
            out = {"x_vector": voice.x_vector.float().cpu().numpy()}  # .cpu(): waits for the side stream's work
            if voice.ref_codes is not None:
                out["ref_codes"] = voice.ref_codes.cpu().numpy().astype(np.int64)
                out["ref_ids"] = np.asarray(ref_ids, dtype=np.int64)
        return out

    def add_voice(self, voice_id: str, prompt: dict[str, Any], ref_text: str | None) -> None:
        import torch

        from .model.generate import Voice

        if not self.supports_voice_upload:
            raise EngineError("unsupported", "only Base checkpoints take uploaded voices")
        x_vector = torch.as_tensor(prompt["x_vector"]).to(self.tts.device, next(self.tts.talker.parameters()).dtype)
        if x_vector.shape != (self.tts.cfg.talker.layers.hidden_size,):
            raise EngineError("bad_request", f"voice {voice_id!r}: an x-vector of shape {tuple(x_vector.shape)} does "
                              "not fit this checkpoint")
        codes = prompt.get("ref_codes")
        icl = codes is not None and ref_text is not None
        self._uploaded[voice_id] = Voice(
            x_vector=x_vector, ref_text=ref_text if icl else None,
            ref_codes=torch.as_tensor(codes, dtype=torch.long) if icl else None,
            ref_ids=[int(i) for i in prompt["ref_ids"]] if icl and "ref_ids" in prompt else None)

    def remove_voice(self, voice_id: str) -> None:
        self._uploaded.pop(voice_id, None)

    # -- requests --------------------------------------------------------------------------------------------------
    def voice_for(self, text: str, language: str) -> str | None:
        """A request's default voice: on CustomVoice, a native speaker of its language (an English text gets Ryan),
        the language read from the script when it is `auto` (kana: Japanese, hangul: Korean, other CJK: Chinese,
        else English); languages without a native speaker get the English one."""
        if self.tts is None or self.tts.cfg.tts_model_type != "custom_voice":
            return self.default_voice()
        return native_speaker([v.id for v in self.voices()], text, language)

    def prompt_inputs(self, request: SynthesisRequest, non_streaming: bool | None = None) -> Any:
        """The request's tokenized, validated inputs (voice by language when none is named)."""
        from .model.generate import Voice
        from .model.prompt import PromptError

        language = (request.language or "auto").lower()
        language = ISO_LANGUAGES.get(language, language)
        voice_id = request.voice or self.voice_for(request.text, language)
        if voice_id not in self._uploaded and voice_id not in {v.id for v in self.voices()}:
            raise EngineError("voice_not_found", f"voice {voice_id!r} not found; see GET /v1/voices")
        if language not in self.tts.cfg.languages:
            raise EngineError("language_not_supported", f"language {request.language!r} is not supported")
        voice = self._uploaded.get(voice_id) or self._voice_kwargs.get(voice_id) or \
            (Voice(speaker=voice_id) if voice_id not in (DESIGN_VOICE, CLONE_VOICE) else None)
        try:
            return self.tts.prompt_inputs(request.text, voice, language, request.instruct, non_streaming)
        except PromptError as exc:
            raise EngineError("bad_request", str(exc)) from exc

    def prompt_rows(self, inputs: Any) -> Any:
        from .model.prompt import PromptError, prompt_rows

        try:
            return prompt_rows(self.tts.cfg, inputs)
        except PromptError as exc:
            raise EngineError("bad_request", str(exc)) from exc

    def frame_budget(self, request: SynthesisRequest, prompt_tokens: int, text: str | None = None) -> int:
        """The runaway guard: budget_factor x the text's expected frames (0.37 s a word), at least min_budget_s,
        at most max_frames, the request's max_audio_ms and the positions its slot has left after the prompt.
        A text whose expected frames alone do not fit is refused (text_too_long). `text`: the text so far of a
        stream whose text is still arriving (default: the request's)."""
        expected = 12.5 * 0.37 * max(1, len((request.text if text is None else text).split()))
        room = self.runner.config.max_positions - prompt_tokens
        if room < math.ceil(expected):
            raise EngineError("text_too_long", f"the text needs about {math.ceil(expected)} frames after its "
                              f"{prompt_tokens}-token prompt, but a stream holds {self.runner.config.max_positions} "
                              "positions (max_positions); send it in shorter pieces")
        frames = max(math.ceil(self.budget_factor * expected), math.ceil(self.min_budget_s / FRAME_S))
        frames = min(frames, self.max_frames, room)
        if request.max_audio_ms is not None:
            frames = min(frames, math.ceil(request.max_audio_ms / FRAME_MS))
        return max(1, frames)

    def check_trailing(self, count: int) -> None:
        if count > self.runner.config.max_trailing:
            raise EngineError("text_too_long", f"text of {count} tokens is over the streamed-text limit "
                              f"({self.runner.config.max_trailing})")

    def submit(self, request: SynthesisRequest, rows: Any, budget: int) -> LoopStream:
        engine_request = Request(rows, len(rows), budget, self.chunk_schedule, self._param_row)
        return self.loop.submit(request, engine_request)

    def open_stream(self, request: SynthesisRequest) -> AudioStream:
        if not self._ready or self.loop is None:
            raise EngineError("not_ready", "the Qwen3-TTS engine is still loading")
        if request.text_open:
            stream: AudioStream = StreamedText(self, request, self.text_min_tokens)
        else:
            rows = self.prompt_rows(self.prompt_inputs(request))
            budget = self.frame_budget(request, len(rows))
            self.check_trailing(len(rows.trailing))
            stream = self.submit(request, rows, budget)
        if request.word_times and self.word_aligner is not None:
            from ..aligner.stream import AlignedStream

            o = self.options  # held: audio released as its words are measured, in pieces of the sentence
            group_ms = o.aligner_group_ms if request.word_times_hold else o.aligner_not_held_group_ms
            return AlignedStream(stream, self.word_aligner, group_samples=group_ms * SAMPLE_RATE // 1000,
                                 margin_samples=o.aligner_margin_ms * SAMPLE_RATE // 1000,
                                 hold=request.word_times_hold)
        return stream


def create_engine(**options: Any) -> Qwen3TTSEngine:
    """The engine from `--engine-option` values (strings from the command line, typed values from TOML)."""
    parsed = parse(options)
    if "model" not in options:
        raise ValueError("the qwen3tts engine needs a `model` option (checkpoint directory or HF repo id)")
    return Qwen3TTSEngine(parsed)

"""The Qwen3-TTS adapter behind `voxgate.engine.base.Engine`: eager, batch 1 per request.

One worker thread owns the model (one GPU, one request at a time; the batched engine loop is a later issue), so
synthesis never runs on the event loop. Each request streams: every `chunk_frames` frames the new frames go through
the incremental codec (codec_stream.CodecStream: the request holds a slot of carried state, each frame is decoded
once, and the audio is final because the codec is causal with zero lookahead, design §9) and the new samples are
sent. Cancel sets an event checked before every frame and ends the iteration at once; a request cancelled before
its turn never runs.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import threading
from collections.abc import AsyncIterator
from typing import Any

import numpy as np

from ..base import AudioStream, Engine, EngineError, SynthesisRequest, VoiceInfo

FRAME_MS = 80  # 12.5 Hz
ISO_LANGUAGES = {"zh": "chinese", "en": "english", "de": "german", "it": "italian", "pt": "portuguese",
                 "es": "spanish", "ja": "japanese", "ko": "korean", "fr": "french", "ru": "russian"}
NATIVE = {"vivian": "zh", "serena": "zh", "uncle_fu": "zh", "dylan": "zh", "eric": "zh", "ryan": "en",
          "aiden": "en", "ono_anna": "ja", "sohee": "ko"}
DESIGN_VOICE = "design"  # VoiceDesign: the request's instruct describes the voice
CLONE_VOICE = "clone"  # Base: the x-vector of the `ref_audio` option
_END = object()


class Qwen3TTSStream(AudioStream):
    def __init__(self, engine: Qwen3TTSEngine, request: SynthesisRequest, inputs: Any, max_frames: int) -> None:
        self.request = request
        self._engine = engine
        self._inputs = inputs
        self._max_frames = max_frames
        self._cancel = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._started = False

    def cancel(self) -> None:
        if self._cancel.is_set():
            return
        self._cancel.set()
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, _END)

    def _emit(self, item: Any) -> None:  # worker thread -> event loop
        if self._loop is not None and not self._cancel.is_set():
            self._loop.call_soon_threadsafe(self._queue.put_nowait, item)

    def _run(self) -> None:
        """Worker thread: generate, decode at chunk boundaries, emit int16 chunks."""
        engine = self._engine
        engine._waiting -= 1
        if self._cancel.is_set():
            return
        try:
            for chunk in engine._synthesize(self._inputs, self._max_frames, self._cancel):
                self._emit(chunk)
        except Exception as exc:  # surfaced to the consumer, not lost in the thread
            self._emit(exc)
        finally:
            if self._loop is not None:
                self._loop.call_soon_threadsafe(self._queue.put_nowait, _END)

    async def __aiter__(self) -> AsyncIterator[np.ndarray]:
        if self._started:
            raise RuntimeError("an AudioStream can be iterated once")
        self._started = True
        self._loop = asyncio.get_running_loop()
        if self._cancel.is_set():
            return
        self._engine._waiting += 1
        self._engine._streams.add(self)
        self._engine._executor.submit(self._run)
        try:
            while True:
                item = await self._queue.get()
                if item is _END or self._cancel.is_set():
                    return
                if isinstance(item, Exception):
                    raise EngineError("synthesis_failed", f"synthesis failed: {item}") from item
                yield item
        finally:
            self.cancel()  # the consumer left early: stop the worker at the next frame
            self._engine._streams.discard(self)


class Qwen3TTSEngine(Engine):
    name = "qwen3tts"

    def __init__(self, model: str, device: str | None = None, dtype: str | None = None, max_frames: int = 2048,
                 chunk_frames: int | str = "4,8,16", ref_audio: str | None = None, greedy: bool = False,
                 warmup: bool = True) -> None:
        # The chunk schedule: a small first chunk for quick first audio, then larger ones (the last one repeats).
        schedule = tuple(int(x) for x in str(chunk_frames).split(","))
        if max_frames <= 0 or not schedule or min(schedule) <= 0:
            raise ValueError("max_frames and chunk_frames must be positive")
        self.chunk_schedule = schedule
        self.model_path = model
        self.device = device
        self.dtype = dtype
        self.max_frames = int(max_frames)
        self.ref_audio = ref_audio
        self.greedy = greedy
        self.warmup = warmup
        self.tts: Any = None
        self.codec_stream: Any = None  # CodecStream with one usable slot: requests run one at a time
        self._voice_kwargs: dict[str, Any] = {}
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="qwen3tts")
        self._ready = False
        self._waiting = 0
        self._streams: set[Qwen3TTSStream] = set()

    # -- lifecycle -----------------------------------------------------------------------------------------------
    def _load(self) -> None:
        import torch

        from .codec_stream import CodecStream
        from .generate import Qwen3TTS, Voice
        from .wav import read_wav

        device = self.device or ("cuda" if torch.cuda.is_available() else "cpu")
        dtype = self.dtype or ("bf16" if device.startswith("cuda") else "fp32")
        self.tts = Qwen3TTS.from_pretrained(self.model_path, device=device, dtype=dtype)
        self.codec_stream = CodecStream(self.tts.codec, num_slots=2)
        if self.tts.cfg.tts_model_type == "base" and self.ref_audio:
            audio, sr = read_wav(self.ref_audio)
            self._voice_kwargs[CLONE_VOICE] = Voice(x_vector=self.tts.speaker_embedding(audio, sr))
        if self.warmup:
            voice = self.voices()[0].id if self.voices() else None
            if voice is not None:
                inputs = self._inputs(SynthesisRequest(text="Warm up.", voice=voice, instruct="A calm voice."))
                for _ in self._synthesize(inputs, 2, threading.Event()):
                    pass

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._load)
        self._ready = True

    async def stop(self) -> None:
        self._ready = False
        for stream in list(self._streams):
            stream.cancel()  # the running job stops at its next frame; queued ones never start
        self._executor.shutdown(wait=False, cancel_futures=True)

    @property
    def ready(self) -> bool:
        return self._ready

    def info(self) -> dict[str, Any]:
        tts = self.tts
        loaded = tts is not None
        return {"name": self.name, "model": self.model_path, "model_type": tts.cfg.tts_model_type if loaded else None,
                "device": str(tts.device) if loaded else self.device,
                "dtype_talker": str(next(tts.talker.parameters()).dtype) if loaded else self.dtype,
                "dtype_codec": str(next(tts.codec.parameters()).dtype) if loaded else None,
                "chunk_schedule_frames": list(self.chunk_schedule), "codec": "incremental (each frame decoded once)",
                "max_frames": self.max_frames, "batching": "none (eager, one request at a time)"}

    @property
    def queue_depth(self) -> int:
        return self._waiting

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

    # -- requests --------------------------------------------------------------------------------------------------
    def _inputs(self, request: SynthesisRequest) -> Any:
        from .generate import Voice
        from .prompt import PromptError

        voice_id = request.voice or self.default_voice()
        if voice_id not in {v.id for v in self.voices()}:
            raise EngineError("voice_not_found", f"voice {voice_id!r} not found; see GET /v1/voices")
        language = (request.language or "auto").lower()
        language = ISO_LANGUAGES.get(language, language)
        if language not in self.tts.cfg.languages:
            raise EngineError("language_not_supported", f"language {request.language!r} is not supported")
        voice = self._voice_kwargs.get(voice_id) or (Voice(speaker=voice_id) if voice_id not in
                                                     (DESIGN_VOICE, CLONE_VOICE) else None)
        try:
            return self.tts.prompt_inputs(request.text, voice, language, request.instruct)
        except PromptError as exc:
            raise EngineError("bad_request", str(exc)) from exc

    def open_stream(self, request: SynthesisRequest) -> Qwen3TTSStream:
        if not self._ready or self.tts is None:
            raise EngineError("not_ready", "the Qwen3-TTS engine is still loading")
        inputs = self._inputs(request)
        max_frames = self.max_frames
        if request.max_audio_ms is not None:
            max_frames = min(max_frames, math.ceil(request.max_audio_ms / FRAME_MS))
        return Qwen3TTSStream(self, request, inputs, max_frames)

    def _synthesize(self, inputs: Any, max_frames: int, cancel: threading.Event) -> Any:
        """Worker thread: yield int16 chunks of final audio, one per `chunk_frames` frames (and the remainder)."""
        import torch

        tts = self.tts
        gen = tts.cfg.generation.greedy() if self.greedy else tts.cfg.generation
        prompt = tts.build(inputs)
        codec = self.codec_stream
        slot = torch.tensor([codec.open()], device=codec.device)
        try:
            if prompt.ref_codes is not None:  # ICL: the reference frames warm the codec state, their audio unused
                ref = prompt.ref_codes.to(codec.device)
                codec.warm(slot, ref[None], torch.tensor([ref.shape[0]], device=codec.device))
            pending: list[torch.Tensor] = []
            chunks = 0
            for frame in tts.frames(prompt, gen, max_frames, cancel=cancel):
                pending.append(frame)
                if len(pending) >= self.chunk_schedule[min(chunks, len(self.chunk_schedule) - 1)]:
                    yield self._decode(slot, pending)
                    pending, chunks = [], chunks + 1
            if pending and not cancel.is_set():
                yield self._decode(slot, pending)
        finally:
            codec.close(int(slot[0]))  # end, cancel or error: the slot is free for the next request

    def _decode(self, slot: Any, frames: list[Any]) -> np.ndarray:
        """The audio of new frames [n, 16], continuing the request's codec state."""
        import torch

        from .wav import to_int16

        codec = self.codec_stream
        codes = torch.stack(frames).to(codec.device)[None]
        audio = codec.step(slot, codes, torch.tensor([codes.shape[1]], device=codec.device))[0]
        return to_int16(audio.cpu().numpy())


def create_engine(**options: Any) -> Qwen3TTSEngine:
    """Options: model (dir or HF repo id), device, dtype, max_frames, chunk_frames, ref_audio (Base), greedy,
    warmup."""
    if "model" not in options:
        raise ValueError("the qwen3tts engine needs a `model` option (checkpoint directory or HF repo id)")
    return Qwen3TTSEngine(**options)

"""The embedded default engine: espeak-ng (from the espeakng-loader wheel) through ctypes, resampled to 24 kHz.

espeak-ng keeps global state and is not thread-safe, so one worker thread owns it and runs jobs one at a time.
A request is split into sentences and each sentence is a separate job, so concurrent streams interleave at
sentence granularity instead of one long passage holding the synthesizer. espeak calls back with audio as it
synthesizes (every `_BUFFER_MS`), and each piece is resampled and handed to the stream's asyncio queue at once.
"""

from __future__ import annotations

import asyncio
import ctypes
import queue
import re
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import numpy as np
import soxr

from .base import SAMPLE_RATE, AudioStream, Engine, EngineError, SynthesisRequest, VoiceInfo
from .espeak_words import WordClock, word_events
from .words import WordTime

_AUDIO_OUTPUT_SYNCHRONOUS = 2
_CHARS_UTF8 = 1
_PARAM_RATE = 1
_BUFFER_MS = 60  # espeak's callback granularity: small enough for a quick first chunk
_SENTENCE_END = re.compile(r"(?<=[.!?;:。！？；])\s+|\n+")
_DEFAULT_VOICE = "en-us"
_REGION_DEFAULTS = {"en": "en-us", "zh": "cmn", "fr": "fr-fr"}  # a bare code whose espeak voices all have a region
_LANGUAGE_VOICES = {"english": "en-us", "chinese": "cmn", "german": "de", "italian": "it", "portuguese": "pt",
                    "spanish": "es", "japanese": "ja", "korean": "ko", "french": "fr-fr", "russian": "ru"}


class _EspeakVoice(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("languages", ctypes.c_void_p),  # (priority byte, NUL-terminated tag)*, then a 0 byte
        ("identifier", ctypes.c_char_p),
        ("gender", ctypes.c_ubyte),
        ("age", ctypes.c_ubyte),
        ("variant", ctypes.c_ubyte),
        ("xx1", ctypes.c_ubyte),
        ("score", ctypes.c_int),
        ("spare", ctypes.c_void_p),
    ]


_SynthCallback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p)


def _first_language(ptr: int) -> str:
    # The field starts with a priority byte, then the tag up to the NUL.
    raw = ctypes.string_at(ptr + 1)
    return raw.decode("ascii", "replace").lower()


def split_sentences(text: str) -> list[str]:
    return [part.strip() for part in _SENTENCE_END.split(text) if part.strip()]


@dataclass
class _Job:
    text: str
    voice_name: bytes
    rate_wpm: int | None
    # called on the worker thread with each piece of audio and its word events (text position, audio ms); None:
    # the job's end
    on_audio: Callable[[np.ndarray | None, BaseException | None, list[tuple[int, int]]], None]
    cancelled: threading.Event
    word_events: bool = False


class _EspeakWorker:
    """The one thread that owns libespeak-ng."""

    def __init__(self) -> None:
        import espeakng_loader

        self._lib = ctypes.CDLL(espeakng_loader.get_library_path())
        self._lib.espeak_ListVoices.restype = ctypes.POINTER(ctypes.POINTER(_EspeakVoice))
        self._data_path = espeakng_loader.get_data_path().encode()
        self._jobs: queue.Queue[_Job | None] = queue.Queue()
        self._job: _Job | None = None
        self._callback = _SynthCallback(self._on_samples)  # keep a reference: espeak holds a raw pointer
        self.native_rate = 0
        self.voices: list[tuple[str, str, str, int]] = []  # (id, name, identifier, gender)
        started = threading.Event()
        self._start_error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(started,), name="espeak-ng", daemon=True)
        self._thread.start()
        started.wait()
        if self._start_error is not None:
            raise self._start_error

    def _init_library(self) -> None:
        rate = self._lib.espeak_Initialize(_AUDIO_OUTPUT_SYNCHRONOUS, _BUFFER_MS, self._data_path, 0)
        if rate <= 0:
            raise RuntimeError(f"espeak_Initialize failed ({rate}); data path {self._data_path!r}")
        self.native_rate = rate
        self._lib.espeak_SetSynthCallback(self._callback)
        table = self._lib.espeak_ListVoices(None)
        seen: set[str] = set()
        i = 0
        while table[i]:
            v = table[i].contents
            voice_id = _first_language(v.languages)
            if voice_id and voice_id not in seen:
                seen.add(voice_id)
                self.voices.append((voice_id, v.name.decode(), v.identifier.decode(), v.gender))
            i += 1

    def _run(self, started: threading.Event) -> None:
        try:
            self._init_library()
        except BaseException as exc:  # reported to the constructor
            self._start_error = exc
            started.set()
            return
        started.set()
        while (job := self._jobs.get()) is not None:
            if job.cancelled.is_set():
                job.on_audio(None, None, [])  # nobody may wait forever on a skipped job
                continue
            self._job = job
            try:
                if self._lib.espeak_SetVoiceByName(job.voice_name) != 0:
                    raise RuntimeError(f"espeak could not load voice {job.voice_name.decode()!r}")
                if job.rate_wpm is not None:
                    self._lib.espeak_SetParameter(_PARAM_RATE, job.rate_wpm, 0)
                data = job.text.encode("utf-8")
                status = self._lib.espeak_Synth(data, len(data) + 1, 0, 0, 0, _CHARS_UTF8, None, None)
                if status != 0 and not job.cancelled.is_set():
                    raise RuntimeError(f"espeak_Synth failed with status {status}")
                job.on_audio(None, None, [])  # end of this job
            except Exception as exc:
                job.on_audio(None, exc, [])
            finally:
                self._job = None
                if job.rate_wpm is not None:
                    self._lib.espeak_SetParameter(_PARAM_RATE, 175, 0)

    def _on_samples(self, wav: ctypes._Pointer, num_samples: int, events: int) -> int:
        job = self._job
        if job is None or job.cancelled.is_set():
            return 1  # abort synthesis: the stream was cancelled
        marks = word_events(events) if job.word_events else []
        if wav and num_samples > 0:
            job.on_audio(np.ctypeslib.as_array(wav, shape=(num_samples,)).copy(), None, marks)
        elif marks:
            job.on_audio(np.zeros(0, np.int16), None, marks)
        return 0

    def submit(self, job: _Job) -> None:
        self._jobs.put(job)

    @property
    def backlog(self) -> int:
        return self._jobs.qsize()

    def close(self) -> None:
        self._jobs.put(None)


_worker: _EspeakWorker | None = None
_worker_lock = threading.Lock()


def _shared_worker() -> _EspeakWorker:
    # One synthesizer per process: libespeak-ng's state is global.
    global _worker
    with _worker_lock:
        if _worker is None:
            _worker = _EspeakWorker()
        return _worker


class EspeakStream(AudioStream):
    def __init__(self, engine: EspeakEngine, request: SynthesisRequest, voice_name: bytes) -> None:
        self.request = request
        self._engine = engine
        self._voice_name = voice_name
        self._cancelled = threading.Event()
        self._clock: WordClock | None = None  # request.word_times: espeak's word events, audio held to match

    def cancel(self) -> None:
        self._cancelled.set()

    def take_words(self) -> list[WordTime]:
        return self._clock.take() if self._clock is not None else []

    def _release(self, held: np.ndarray, out: np.ndarray, at: int) -> tuple[np.ndarray, np.ndarray]:
        """With word times: of the audio made (`held`, then `out`, the first at stream sample `at`), what may go out
        now (before the start of a word whose end is not yet known) and what waits."""
        if self._clock is None:
            return out, held
        held = np.concatenate([held, out]) if len(held) else out
        limit = self._clock.hold_from()
        n = len(held) if limit is None else max(0, min(len(held), limit - at))
        return held[:n], held[n:]

    async def __aiter__(self) -> AsyncIterator[np.ndarray]:
        loop = asyncio.get_running_loop()
        worker = self._engine.worker
        resampler = soxr.ResampleStream(worker.native_rate, SAMPLE_RATE, 1, dtype="int16", quality="HQ")
        budget = None if self.request.max_audio_ms is None else self.request.max_audio_ms * SAMPLE_RATE // 1000
        produced = 0
        held = np.zeros(0, np.int16)  # word times: audio from the start of the word still open
        if self.request.word_times:
            self._clock = WordClock(worker.native_rate)
        try:
            for sentence in split_sentences(self.request.text):
                if self._cancelled.is_set():
                    return
                pieces: asyncio.Queue[tuple[np.ndarray | None, BaseException | None, list]] = asyncio.Queue()

                def on_audio(samples: np.ndarray | None, error: BaseException | None, marks: list,
                             q=pieces) -> None:
                    try:
                        loop.call_soon_threadsafe(q.put_nowait, (samples, error, marks))
                    except RuntimeError:  # the consumer's event loop is gone: nobody is listening
                        self._cancelled.set()

                job = _Job(sentence, self._voice_name, self._engine.rate_wpm, on_audio, self._cancelled,
                           self._clock is not None)
                if self._clock is not None:
                    self._clock.begin(sentence)
                self._engine._pending += 1
                worker.submit(job)
                try:
                    while True:
                        samples, error, marks = await pieces.get()
                        if error is not None:
                            raise EngineError("synthesis_failed", f"espeak-ng failed: {error}")
                        if self._cancelled.is_set():
                            break
                        if self._clock is not None:
                            if samples is None:
                                self._clock.end_sentence()
                            else:
                                self._clock.on_piece(marks, len(samples))
                        out = resampler.resample_chunk(samples) if samples is not None else held[:0]
                        out, held = self._release(held, out, produced)
                        if samples is None and not len(out):
                            break
                        if budget is not None and produced + len(out) >= budget:
                            yield out[: budget - produced]
                            return
                        produced += len(out)
                        if len(out):
                            yield out
                        if samples is None:
                            break
                finally:
                    self._engine._pending -= 1
            if self._cancelled.is_set():
                return
            tail = resampler.resample_chunk(np.zeros(0, np.int16), last=True)
            if budget is not None:
                tail = tail[: max(0, budget - produced)]
            if len(tail):
                yield tail
        finally:
            # Whether finished, cancelled or abandoned: stop any job of ours still queued or running.
            self._cancelled.set()


class EspeakEngine(Engine):
    """Options: `rate_wpm` (speaking rate, espeak's default 175)."""

    name = "espeak"
    supports_instruct = False
    supports_word_times = True  # espeak's own word events (espeak_words.py)

    def __init__(self, rate_wpm: int | None = None) -> None:
        if rate_wpm is not None and not 80 <= int(rate_wpm) <= 450:
            raise ValueError("rate_wpm must be within 80..450")
        self.rate_wpm = None if rate_wpm is None else int(rate_wpm)
        self._worker: _EspeakWorker | None = None
        self._voices: list[VoiceInfo] = []
        self._names: dict[str, bytes] = {}
        self._pending = 0

    @property
    def worker(self) -> _EspeakWorker:
        if self._worker is None:
            raise RuntimeError("EspeakEngine.start() was not called")
        return self._worker

    async def start(self) -> None:
        self._worker = await asyncio.to_thread(_shared_worker)
        genders = {1: "male", 2: "female"}
        self._voices = [
            VoiceInfo(vid, name, (vid,), genders.get(gender), f"espeak-ng {identifier}")
            for vid, name, identifier, gender in self._worker.voices
        ]
        self._voices.sort(key=lambda v: (v.id != _DEFAULT_VOICE, v.id))
        self._names = {vid: identifier.encode() for vid, _, identifier, _ in self._worker.voices}

    async def stop(self) -> None:
        pass  # the worker thread is per process and holds no per-engine state

    @property
    def ready(self) -> bool:
        return self._worker is not None

    @property
    def queue_depth(self) -> int:
        return self._pending

    def voices(self) -> list[VoiceInfo]:
        return self._voices

    def default_voice(self) -> str:
        return _DEFAULT_VOICE

    def info(self) -> dict[str, object]:
        return {"name": self.name, "native_rate": self.worker.native_rate if self._worker else None,
                "sample_rate": SAMPLE_RATE, "rate_wpm": self.rate_wpm or 175, "voices": len(self._voices)}

    def language_for(self, tag: str, name: str) -> str | None:
        """The espeak voice of a language: the tag's own (`pt-br`, `en-gb`), else that of a shorter prefix
        (`en-au` -> `en` -> `en-us`, `zh-hans` -> `cmn`); None where espeak has none."""
        parts = tag.split("-")
        for end in range(len(parts), 0, -1):
            prefix = "-".join(parts[:end])
            voice = _REGION_DEFAULTS.get(prefix, prefix)
            if voice in self._names:
                return voice
        return None

    def resolve_voice(self, voice: str | None, language: str | None) -> str:
        if voice:
            return voice.lower()
        if language and language.lower() not in ("auto", ""):
            lang = language.lower()
            return _LANGUAGE_VOICES.get(lang, lang)
        return _DEFAULT_VOICE

    def open_stream(self, request: SynthesisRequest) -> EspeakStream:
        voice = self.resolve_voice(request.voice, request.language)
        name = self._names.get(voice)
        if name is None and not request.voice and request.language:  # the voice came from the language
            raise EngineError("language_not_supported", f"language {request.language!r} is not supported; "
                              "the voices' languages are in GET /v1/voices")
        if name is None:
            raise EngineError("voice_not_found", f"voice {voice!r} not found; see GET /v1/voices")
        return EspeakStream(self, request, name)

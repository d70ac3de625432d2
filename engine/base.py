"""The engine interface: the only thing the gateway knows about speech synthesis.

A `SynthesisRequest` opens an `AudioStream`, an async iterator of 24 kHz mono PCM16 chunks. The stream can be
cancelled at any point; cancel frees the engine's resources for it at once (a GPU row, a slot, a thread job) and
ends the iteration. Engines are created by name through `voxgate.engine.registry.create_engine`.
"""

from __future__ import annotations

import abc
import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .admission import Forecast
from .words import WordTime

SAMPLE_RATE = 24_000  # every engine speaks 24 kHz mono PCM16

_request_ids = itertools.count(1)


class EngineError(Exception):
    """A request the engine cannot serve (unknown voice, bad language, ...). The message is shown to the client."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(slots=True)
class SynthesisRequest:
    text: str
    voice: str | None = None  # None: the engine's default voice
    language: str | None = None  # None or "auto": the engine decides
    instruct: str | None = None  # style instruction, for engines that take one
    max_audio_ms: int | None = None  # length budget: the stream ends after this much audio (runaway guard)
    # More text follows through AudioStream.append_text until end_text (engines with supports_text_streaming):
    # `text` is then only the first part, and audio may start before the rest arrives.
    text_open: bool = False
    # Word times wanted (engines with supports_word_times): AudioStream.take_words gives them, before their audio.
    word_times: bool = False
    # False: no audio is held for word times (engines that measure them on the audio, word_times_by_sentence): the
    # audio goes out as it is made, and each word as soon as it is measured, perhaps after its audio (engine/words.py).
    word_times_hold: bool = True
    request_id: int = field(default_factory=lambda: next(_request_ids))

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise TypeError("text must be a str")
        if self.max_audio_ms is not None and self.max_audio_ms <= 0:
            raise ValueError("max_audio_ms must be positive")


@dataclass(frozen=True, slots=True)
class VoiceInfo:
    id: str
    name: str
    languages: tuple[str, ...] = ()
    gender: str | None = None
    description: str = ""

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.id,
            "name": self.name,
            "languages": list(self.languages),
            "gender": self.gender,
            "description": self.description,
        }


class AudioStream(abc.ABC):
    """Audio of one request: `async for chunk in stream` yields 1-D int16 arrays at `SAMPLE_RATE`."""

    request: SynthesisRequest

    @abc.abstractmethod
    def __aiter__(self) -> AsyncIterator[np.ndarray]: ...

    @abc.abstractmethod
    def cancel(self) -> None:
        """Stop now and free the request's resources. Idempotent; safe from any point of the iteration."""

    def append_text(self, text: str) -> None:
        """More text of a `text_open` request, in order. Safe from the event loop at any time before end_text;
        raises EngineError("text_closed") after it. Engines without supports_text_streaming never get here."""
        raise EngineError("unsupported", "this engine takes a request's whole text at once")

    def end_text(self) -> None:
        """No more text: the stream speaks what it has and ends. Idempotent."""
        raise EngineError("unsupported", "this engine takes a request's whole text at once")

    def take_words(self) -> list[WordTime]:
        """The words of a `word_times` request not yet taken, in order, each once (engine/words.py): after the
        stream yields a chunk, every word whose audio starts in it or before is among them. Times are in samples
        from the stream's first sample. Engines without supports_word_times return none."""
        return []

    def can_append_text(self, text: str) -> bool:
        """Whether `append_text(text)` would fit: a stream holds a bounded text (qwen3tts: the positions of its
        slot), and one that is full refuses more with EngineError("text_too_long"), changing nothing. The
        gateway asks ahead and ends a nearly full stream's text at a sentence end. No side effects."""
        return True

    def first_audio_stamps(self) -> dict[str, float]:
        """When this stream passed the stages of its first audio that the engine has (engine/timeline.py's
        STAGES: queue, prefill, first_frame, codec, hand_over), as time.monotonic() values; read by the gateway once
        the first chunk is out. Stages an engine does not have are left out (none by default)."""
        return {}

    def report_playback(self, buffered_s: float) -> None:  # noqa: B027 (a hint engines may ignore)
        """Hint from the gateway: this stream's listener holds `buffered_s` seconds of its audio right now (audio
        sent but not yet played, plus audio made but not yet sent). An engine that schedules by playback deadline
        (qwen3tts) serves the streams closest to a stall first and lets streams far ahead wait; without hints it
        assumes playback at 1x from the first chunk. Cheap and thread-safe to call as often as reports arrive;
        engines without deadlines ignore it."""


class Engine(abc.ABC):
    """A speech engine. `start()` loads and warms it; `ready` turns true only after warm-up."""

    name: str = "engine"
    sample_rate: int = SAMPLE_RATE
    supports_instruct: bool = True  # False: `SynthesisRequest.instruct` is ignored (the gateway warns the client)
    requires_instruct: bool = False  # True: the instruct describes the voice (VoiceDesign); a request needs one
    # True: a request may be opened with `text_open` and fed by AudioStream.append_text / end_text, one stream per
    # turn (the gateway then stops cutting the turn's text into sentences). False: whole texts only.
    supports_text_streaming: bool = False
    # True: voices made from a reference recording can be added at run time (voice_prompt, add_voice, remove_voice;
    # the gateway's POST /v1/voices). False: those methods raise EngineError("unsupported").
    supports_voice_upload: bool = False
    # True: a request with `word_times` gets measured word times through AudioStream.take_words (engine/words.py).
    supports_word_times: bool = False
    # True: word times are measured on a request's complete audio (a forced aligner), which the stream holds until
    # then; the gateway sends a word-times turn sentence by sentence (no text streaming), so a request is a sentence.
    word_times_by_sentence: bool = False

    @abc.abstractmethod
    async def start(self) -> None: ...

    @abc.abstractmethod
    async def stop(self) -> None: ...

    @property
    @abc.abstractmethod
    def ready(self) -> bool: ...

    @abc.abstractmethod
    def voices(self) -> list[VoiceInfo]: ...

    @abc.abstractmethod
    def open_stream(self, request: SynthesisRequest) -> AudioStream:
        """Start synthesis. Raises `EngineError` for a request it cannot serve (e.g. voice_not_found)."""

    @property
    def queue_depth(self) -> int:
        """Requests admitted but not yet producing audio (for /metrics)."""
        return 0

    @property
    def free_rows(self) -> int | None:
        """Streams the engine could start now without queueing (free rows of its batch state); None: no fixed
        bound (CPU engines). A balancer's load signal (GET /health/load) and admission (max_queued_streams)."""
        return None

    def admission_forecast(self, queued: int = 0) -> Forecast | None:
        """What one more stream would meet if it came now (engine/admission.py): its first-audio time, the load
        with it, the slots left; `queued`: streams the gateway admitted that have not reached the engine yet (they
        come first). None: no opinion (the gateway admits, up to `max_queued_streams`). Called on the event loop
        for every new stream: cheap, no side effects."""
        return None

    def register_metrics(self, registry: Any) -> None:  # noqa: B027 (engines without metrics ignore it)
        """Called once, before start(), with the gateway's Prometheus CollectorRegistry: an engine adds its own
        families (voxgate_engine_*) there so they appear on GET /metrics."""

    def word_times_unavailable(self) -> str:
        """Why this engine gives no word times (without supports_word_times): shown to a client that asks."""
        return f"the {self.name} engine does not measure word times"

    def default_voice(self) -> str | None:
        voices = self.voices()
        return voices[0].id if voices else None

    def language_for(self, tag: str, name: str) -> str | None:
        """What this engine calls a language (its `SynthesisRequest.language`), given its lower-case BCP-47 tag
        (`en-us`, `zh-hans`) and English name (`english`; "" where the gateway's table has none); None: the engine
        does not speak it. By default the name (else the tag): engines that ignore the language take any."""
        return name or tag

    def voice_prompt(self, audio: np.ndarray, sample_rate: int, ref_text: str | None) -> dict[str, np.ndarray]:
        """The conditioning of a reference recording (mono float32 in [-1, 1]), computed once, as named arrays the
        gateway stores and later hands to `add_voice`. `ref_text`: its transcript (in-context cloning), or None.
        Blocking and heavy: call it from a worker thread. EngineError("unsupported") without supports_voice_upload."""
        raise EngineError("unsupported", f"the {self.name} engine takes no uploaded voices")

    def add_voice(self, voice_id: str, prompt: dict[str, np.ndarray], ref_text: str | None) -> None:
        """Serve `voice_id` (a SynthesisRequest.voice from now on) from a `voice_prompt` result. Uploaded voices are
        not in `voices()`: the gateway lists them, per owner."""
        raise EngineError("unsupported", f"the {self.name} engine takes no uploaded voices")

    def remove_voice(self, voice_id: str) -> None:  # noqa: B027 (nothing to remove where nothing was added)
        """Stop serving an uploaded voice (streams already open keep it). Idempotent."""

    def info(self) -> dict[str, object]:
        """What the engine is and how it runs (shown by GET /health and copied into benchmark reports)."""
        return {"name": self.name}

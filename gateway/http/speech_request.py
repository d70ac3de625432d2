"""The body of `POST /v1/audio/speech`, checked at the edge into a `SpeechJob` (or an OpenAI-shaped error).

Accepted: OpenAI's fields (`model`, `input`, `voice`, `instructions`, `response_format`, `speed`, `stream_format`),
vLLM-Omni's extensions for Qwen3-TTS (`task_type`, `language`, `ref_audio`, `ref_text`, `x_vector_only_mode`,
`max_new_tokens`, `initial_codec_chunk_frames`, `non_streaming_mode`, `speaker`) and voxgate's own (`instruct`,
`stream`, `max_audio_ms`, `timestamps`). A field the engine cannot honour is a 400 naming it; one that changes
nothing is accepted only where doing nothing is its meaning (it asks for what the engine does anyway).
docs/http-api.md has the table.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import msgspec
from voxgate.engine.base import SAMPLE_RATE, Engine
from voxgate.gateway.audio.containers import DEFAULT_FORMAT, FORMATS
from voxgate.gateway.protocol import JsonInt, describe_validation_error
from voxgate.gateway.session.state import GatewayState
from voxgate.gateway.voices.model_names import model_ids, model_matches
from voxgate.gateway.voices.openai_names import voice_aliases
from voxgate.gateway.voices.voice_rule import VoiceChoice, VoiceError, choose_voice

FRAME_MS = 80  # a Qwen3-TTS 12 Hz codec frame: the unit of `max_new_tokens` and of `usage.output_tokens`
TASKS = {"custom_voice": "CustomVoice", "voice_design": "VoiceDesign", "base": "Base"}


class VoiceRef(msgspec.Struct, forbid_unknown_fields=True):
    """OpenAI's custom-voice object: `{"id": "..."}`."""

    id: str


class SpeechBody(msgspec.Struct, forbid_unknown_fields=True):
    input: str | None = None
    model: str | None = None
    voice: str | VoiceRef | None = None
    speaker: str | None = None  # vLLM-Omni's alias of voice
    instructions: str | None = None  # OpenAI's name
    instruct: str | None = None  # voxgate's name (as over WebSocket)
    response_format: str | None = None
    speed: JsonInt | float = 1.0
    stream_format: Literal["audio", "sse"] | None = None
    stream: bool = True
    language: str | None = None
    max_audio_ms: JsonInt | None = None
    max_new_tokens: JsonInt | None = None
    task_type: str | None = None
    ref_audio: str | list[str] | None = None
    ref_text: str | None = None
    x_vector_only_mode: bool | None = None
    initial_codec_chunk_frames: JsonInt | None = None
    non_streaming_mode: bool | None = None
    timestamps: str | None = None  # voxgate's: "word": speech.audio.timestamps events (SSE), or a JSON whole answer
    timestamps_hold: bool | None = None  # voxgate's: false, no audio waits for its word times (docs/http-api.md)


_decoder = msgspec.json.Decoder(SpeechBody)


class SpeechError(Exception):
    """A request refused before any audio: HTTP status, message, OpenAI error code, and the field at fault."""

    def __init__(self, status: int, message: str, code: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param


@dataclass(slots=True)
class SpeechJob:
    text: str
    voice: str | None  # an engine voice id; None: the engine's default (which may follow the language)
    language: str | None  # the engine's name of it; None: the engine decides
    instruct: str | None
    format: str
    mode: Literal["audio", "sse", "whole"]
    budget_samples: int
    # non_streaming_mode false: the whole input through one text stream, on engines that take text while speaking
    # (Qwen3-TTS: one text token a frame, as the reference's non_streaming_mode=False); elsewhere it changes nothing
    stream_text: bool = False
    word_times: bool = False  # `timestamps: "word"`: events before their audio (SSE), or the whole answer as JSON
    word_times_hold: bool = True  # `timestamps_hold: false`: no audio waits for its word times

    def usage(self, samples: int) -> dict[str, int]:
        """OpenAI's `usage`: input in characters (the gateway has no tokenizer), output in 80 ms codec frames."""
        inp = len(self.text) + len(self.instruct or "")
        out = math.ceil(samples * 1000 / SAMPLE_RATE / FRAME_MS)
        return {"input_tokens": inp, "output_tokens": out, "total_tokens": inp + out}


def decode_body(raw: bytes) -> SpeechBody:
    try:
        return _decoder.decode(raw)
    except msgspec.ValidationError as exc:
        text = describe_validation_error(exc)
        if text.startswith("expected `object`"):
            raise SpeechError(400, "the body must be a JSON object", "invalid_json") from None
        if text.startswith("unknown field"):
            name = text.partition("'")[2].rstrip("'")
            raise SpeechError(400, f"{text}: this server does not take it (see docs/http-api.md)", "unknown_field",
                              name) from None
        field = re.match(r"(?:missing )?field '([A-Za-z_]\w*)", text)  # the top-level field at fault
        raise SpeechError(400, text, "invalid_type", field.group(1) if field else None) from None
    except msgspec.DecodeError as exc:
        raise SpeechError(400, f"the body must be JSON: {str(exc).removeprefix('JSON is malformed: ')}",
                          "invalid_json") from None
    except RecursionError:
        raise SpeechError(400, "the body must be JSON: nested too deeply", "invalid_json") from None


def _bad(param: str, message: str, code: str = "unsupported_field") -> SpeechError:
    return SpeechError(400, f"{param}: {message}", code, param)


def engine_task(info: dict[str, object]) -> str:
    """The Qwen3-TTS task an engine serves (from its `info()`): the checkpoint's type; engines with fixed voices
    count as CustomVoice."""
    return TASKS.get(str(info.get("model_type", "custom_voice")), "CustomVoice")


def _check_qwen_fields(body: SpeechBody, engine: Engine, info: dict[str, object], task: str) -> None:
    schedule = info.get("chunk_schedule_frames")  # only the qwen3tts engine has codec chunks
    if body.task_type is not None:
        if body.task_type not in TASKS.values():
            raise _bad("task_type", f"must be CustomVoice, VoiceDesign or Base, not {body.task_type!r}",
                       "invalid_value")
        if body.task_type != task:
            raise _bad("task_type", f"{body.task_type} is not served here: this {engine.name} engine serves {task}"
                       " (one checkpoint per server; start one with the matching checkpoint)")
    if body.ref_audio is not None:
        raise _bad("ref_audio", "per-request voice cloning is not offered; upload the recording once (POST "
                   "/v1/voices, on a Base checkpoint) and name the voice id it returns")
    if body.ref_text is not None:
        raise _bad("ref_text", "send the transcript with the recording to POST /v1/voices (mode in_context)")
    if body.x_vector_only_mode is not None and not (body.x_vector_only_mode and task == "Base"):
        raise _bad("x_vector_only_mode", "only true, on a Base checkpoint (its clone voice is x-vector only)")
    if body.initial_codec_chunk_frames is not None:
        if not isinstance(schedule, list) or not schedule:
            raise _bad("initial_codec_chunk_frames", f"the {engine.name} engine has no codec chunks")
        if body.initial_codec_chunk_frames != schedule[0]:
            raise _bad("initial_codec_chunk_frames", f"the first chunk is {schedule[0]} frames on this server (engine"
                       " option chunk_frames); a per-request size is not offered")


def _voice(body: SpeechBody, state: GatewayState, uploaded: Sequence[str], instruct: str | None) -> VoiceChoice:
    voice = body.voice.id if isinstance(body.voice, VoiceRef) else body.voice
    if voice is not None and body.speaker is not None and voice != body.speaker:
        raise _bad("speaker", "names another voice than 'voice'; send one of them", "invalid_value")
    try:
        return choose_voice(state.engine, voice if voice is not None else body.speaker, body.language, instruct,
                            uploaded=uploaded, aliases=voice_aliases(state.engine, state.config.voice_aliases),
                            fields=("voice", "language", "instructions" if body.instruct is None else "instruct"))
    except VoiceError as exc:
        raise SpeechError(404 if exc.code == "voice_not_found" else 400, exc.message, exc.code, exc.field) from None


def check(body: SpeechBody, state: GatewayState, uploaded: Sequence[str] = ()) -> SpeechJob:
    """The job, or a SpeechError naming the first field that cannot be honoured. `uploaded`: the ids of the uploaded
    voices the caller may use (POST /v1/voices)."""
    engine, limits = state.engine, state.config.limits
    info = engine.info()
    text = body.input
    if not text or not text.strip():
        raise SpeechError(400, "'input' is required and must not be empty", "missing_input", "input")
    if len(text) > limits.max_text_chars:
        raise SpeechError(413, f"'input' is over {limits.max_text_chars} characters", "text_too_long", "input")
    ids = model_ids(engine, info, state.config.served_model_name, state.config.model_aliases)
    if body.model is not None and not model_matches(body.model, ids):
        raise SpeechError(404, f"model {body.model!r} is not served here; models: {', '.join(ids)}",
                          "model_not_found", "model")
    fmt = body.response_format if body.response_format is not None else DEFAULT_FORMAT
    if fmt not in FORMATS:
        raise SpeechError(400, f"response_format must be one of {', '.join(FORMATS)}", "unsupported_format",
                          "response_format")
    if body.speed != 1.0:
        raise SpeechError(400, "speed: only 1.0 is offered", "unsupported_speed", "speed")
    if body.instruct is not None and body.instructions is not None and body.instruct != body.instructions:
        raise _bad("instructions", "differs from 'instruct' (the same field under two names); send one",
                   "invalid_value")
    instruct = body.instructions if body.instructions is not None else body.instruct
    if instruct and not engine.supports_instruct:
        name = "instructions" if body.instructions is not None else "instruct"
        raise _bad(name, f"the {engine.name} engine (this checkpoint) takes no style instructions")
    task = engine_task(info)
    _check_qwen_fields(body, engine, info, task)
    choice = _voice(body, state, uploaded, instruct)
    limit_ms = int(limits.max_context_audio_s * 1000)
    budget_ms = limit_ms
    for name, value in (("max_audio_ms", body.max_audio_ms),
                        ("max_new_tokens", None if body.max_new_tokens is None else body.max_new_tokens * FRAME_MS)):
        if value is not None:
            if value <= 0:
                raise _bad(name, "must be positive", "invalid_value")
            budget_ms = min(budget_ms, value)
    mode: Literal["audio", "sse", "whole"] = body.stream_format or ("audio" if body.stream else "whole")
    word_times = _word_times(body.timestamps, engine, mode)
    streamed = body.non_streaming_mode is False and engine.supports_text_streaming
    by_sentence = word_times and engine.word_times_by_sentence  # (engine/base.py)
    return SpeechJob(text, choice.voice, choice.language, instruct or None, fmt, mode, budget_ms * SAMPLE_RATE // 1000,
                     stream_text=streamed and not by_sentence, word_times=word_times,
                     word_times_hold=body.timestamps_hold is not False)


def _word_times(timestamps: str | None, engine: Engine, mode: str) -> bool:
    """`timestamps`: "none" (or omitted) or "word". Word times are measured, never estimated; they travel as SSE
    events, or in the JSON that a whole answer (`stream: false`) becomes with them. A raw audio stream has no room
    for them."""
    if timestamps in (None, "none"):
        return False
    if timestamps != "word":
        raise _bad("timestamps", f"must be 'none' or 'word', not {timestamps!r}", "invalid_value")
    if not engine.supports_word_times:
        raise _bad("timestamps", engine.word_times_unavailable(), "unsupported")
    if mode == "audio":
        raise _bad("timestamps", "word times come as speech.audio.timestamps events (stream_format 'sse') or in the "
                   "JSON of a whole answer (stream: false); a raw audio stream has no room for them")
    return True

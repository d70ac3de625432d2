"""Wire protocol v1 (docs/protocol.md): inbound message schemas, error codes, close codes, the binary header.

Inbound JSON becomes a dataclass here, at the edge; everything past this module handles typed messages only.
"""

from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

PROTOCOL = "voxgate.v1"
TOKEN_SUBPROTOCOL_PREFIX = "voxgate.token."

# Close codes, Starlette-style: the number is in the name.
WS_1000_NORMAL_CLOSURE = 1000
WS_1001_GOING_AWAY = 1001
WS_1008_POLICY_VIOLATION = 1008
WS_1009_MESSAGE_TOO_BIG = 1009
WS_1011_INTERNAL_ERROR = 1011
WS_4001_UNAUTHORIZED = 4001
WS_4008_TIMEOUT = 4008
WS_4029_TOO_MANY_SESSIONS = 4029
WS_4400_PROTOCOL_VIOLATION = 4400

CODECS = {"pcm_s16le": 0, "opus": 1, "mulaw": 3}
PCM_RATES = (8000, 16000, 22050, 24000, 44100, 48000)
FRAME_MS = (10, 20, 40, 60)
# `asap` clients may take longer frames: what the engine made, up to `frame_ms` (a multiple of 20 up to a whole
# qwen3tts chunk of 16 codec frames; 1280 ms at 48 kHz still fits the header's u16 `samples`).
ASAP_FRAME_MS_MAX = 1280
OPUS_PACKET_MS = 20  # Opus packets inside a long (asap) frame
PACING_MODES = ("client_clock", "asap", "realtime")
MAX_TRACKS = 16
_CONTEXT_ID = re.compile(r"^[A-Za-z0-9_.:\-]{1,64}$")

FLAG_FIRST = 1
FLAG_LAST = 2
FLAG_DISCONT = 4
FLAG_CODEC_RESET = 8
FLAG_PACKETS = 16  # Opus: the payload is several packets, each after its u16 little-endian byte length

HEADER = struct.Struct("<BBHIIHHQ")  # version, codec, flags, ctx, seq, track, samples, pts
assert HEADER.size == 24


class ProtocolError(Exception):
    """A message the server answers with an `error`. Fatal ones close the socket with `close_code`."""

    def __init__(self, code: str, message: str, *, context_id: str | None = None, close_code: int | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.context_id = context_id
        self.close_code = close_code

    @property
    def fatal(self) -> bool:
        return self.close_code is not None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "error", "code": self.code, "message": self.message, "fatal": self.fatal}
        if self.context_id is not None:
            out["context_id"] = self.context_id
        return out

    def __repr__(self) -> str:
        return f"ProtocolError({self.code!r}, {self.message!r}, close_code={self.close_code!r})"


def invalid(message: str, context_id: str | None = None) -> ProtocolError:
    return ProtocolError("invalid_message", message, context_id=context_id)


# ---- the binary frame header ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FrameHeader:
    codec: int
    flags: int
    ctx: int
    seq: int
    track: int
    samples: int
    pts: int
    version: int = 1

    def pack(self) -> bytes:
        return HEADER.pack(self.version, self.codec, self.flags, self.ctx, self.seq, self.track, self.samples,
                           self.pts)

    @classmethod
    def unpack(cls, data: bytes | memoryview) -> FrameHeader:
        if len(data) < HEADER.size:
            raise ValueError(f"frame of {len(data)} bytes is shorter than the 24-byte header")
        version, codec, flags, ctx, seq, track, samples, pts = HEADER.unpack_from(data)
        return cls(codec, flags, ctx, seq, track, samples, pts, version)


# ---- inbound messages --------------------------------------------------------------------------------------------
# Each message class declares its JSON fields with their accepted Python types; `parse_message` checks presence,
# types and values, and reports the first problem by field name.


def _check_context_id(value: str) -> None:
    if not _CONTEXT_ID.match(value):
        raise invalid("context_id must be 1-64 characters from [A-Za-z0-9_.:-]")


def _check_track(value: int) -> None:
    if not 0 <= value < MAX_TRACKS:
        raise invalid(f"track must be within 0..{MAX_TRACKS - 1}")


@dataclass(slots=True)
class Message:
    TYPE: ClassVar[str] = ""
    OPTIONAL: ClassVar[frozenset[str]] = frozenset()


@dataclass(slots=True)
class SessionStart(Message):
    TYPE: ClassVar[str] = "session.start"
    OPTIONAL: ClassVar[frozenset[str]] = frozenset(
        {"protocol", "audio", "pacing", "defaults", "feedback_interval_ms", "metrics_interval_ms"})
    protocol: str = PROTOCOL
    audio: dict = field(default_factory=dict)
    pacing: dict = field(default_factory=dict)
    defaults: dict = field(default_factory=dict)
    feedback_interval_ms: int = 50
    metrics_interval_ms: int = 0

    def validate(self) -> None:
        if self.protocol != PROTOCOL:
            raise invalid(f"protocol must be {PROTOCOL!r}")
        _check_keys(self.audio, "audio", {"codec": (str,), "sample_rate": (int,), "frame_ms": (int,),
                                          "channels": (int,), "bitrate": (int,)})
        _check_keys(self.pacing, "pacing", {"mode": (str,), "target_buffer_ms": (int, float),
                                            "max_buffer_ms": (int, float)})
        _check_keys(self.defaults, "defaults", {"voice": (str, type(None)), "language": (str, type(None)),
                                                "instruct": (str, type(None)), "model": (str, type(None))})
        if not 10 <= self.feedback_interval_ms <= 1000:
            raise invalid("feedback_interval_ms must be within 10..1000")
        if self.metrics_interval_ms != 0 and not 100 <= self.metrics_interval_ms <= 60_000:
            raise invalid("metrics_interval_ms must be 0 (off) or within 100..60000")


@dataclass(slots=True)
class ContextOpen(Message):
    TYPE: ClassVar[str] = "context.open"
    OPTIONAL: ClassVar[frozenset[str]] = frozenset(
        {"voice", "language", "instruct", "track", "placement", "max_audio_ms"})
    context_id: str = ""
    voice: str | None = None
    language: str | None = None
    instruct: str | None = None
    track: int = 0
    placement: str = "queue"
    max_audio_ms: int | None = None

    def validate(self) -> None:
        _check_context_id(self.context_id)
        _check_track(self.track)
        if self.placement not in ("queue", "replace"):
            raise invalid("placement must be 'queue' or 'replace'", self.context_id)
        if self.max_audio_ms is not None and self.max_audio_ms <= 0:
            raise invalid("max_audio_ms must be positive", self.context_id)


@dataclass(slots=True)
class TextAppend(Message):
    TYPE: ClassVar[str] = "text.append"
    context_id: str = ""
    text: str = ""

    def validate(self) -> None:
        _check_context_id(self.context_id)


@dataclass(slots=True)
class ContextFlush(Message):
    TYPE: ClassVar[str] = "context.flush"
    OPTIONAL: ClassVar[frozenset[str]] = frozenset({"flush_id"})
    context_id: str = ""
    flush_id: str | int | None = None

    def validate(self) -> None:
        _check_context_id(self.context_id)


@dataclass(slots=True)
class ContextEnd(Message):
    TYPE: ClassVar[str] = "context.end"
    context_id: str = ""

    def validate(self) -> None:
        _check_context_id(self.context_id)


@dataclass(slots=True)
class ContextCancel(Message):
    TYPE: ClassVar[str] = "context.cancel"
    OPTIONAL: ClassVar[frozenset[str]] = frozenset({"played_pts"})
    context_id: str = ""
    played_pts: int | None = None

    def validate(self) -> None:
        _check_context_id(self.context_id)
        if self.played_pts is not None and self.played_pts < 0:
            raise invalid("played_pts must be >= 0", self.context_id)


@dataclass(slots=True)
class Clear(Message):
    TYPE: ClassVar[str] = "clear"

    def validate(self) -> None:
        pass


@dataclass(slots=True)
class Playback(Message):
    TYPE: ClassVar[str] = "playback"
    OPTIONAL: ClassVar[frozenset[str]] = frozenset(
        {"track", "buffered_samples", "underruns", "output_latency_ms", "t_ms"})
    played_pts: int = 0
    track: int = 0
    buffered_samples: int = 0
    underruns: dict = field(default_factory=dict)
    output_latency_ms: int | float = 0
    t_ms: int | float = 0

    def validate(self) -> None:
        _check_track(self.track)
        if self.played_pts < 0 or self.buffered_samples < 0:
            raise invalid("played_pts and buffered_samples must be >= 0")
        _check_keys(self.underruns, "underruns", {"events": (int,), "samples": (int,), "max_gap_ms": (int, float),
                                                  "last_pts": (int,)})
        if any(v < 0 for v in self.underruns.values()):
            raise invalid("underruns counters must be >= 0")


@dataclass(slots=True)
class Ping(Message):
    TYPE: ClassVar[str] = "ping"
    OPTIONAL: ClassVar[frozenset[str]] = frozenset({"t_ms"})
    t_ms: int | float | None = None

    def validate(self) -> None:
        pass


MESSAGE_TYPES: dict[str, type[Message]] = {
    cls.TYPE: cls
    for cls in (SessionStart, ContextOpen, TextAppend, ContextFlush, ContextEnd, ContextCancel, Clear, Playback, Ping)
}

# JSON type(s) accepted per annotation. bool is rejected where int is expected (JSON true is not a number).
_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "str": (str,), "str | None": (str, type(None)), "int": (int,), "int | None": (int, type(None)),
    "dict": (dict,), "int | float": (int, float), "int | float | None": (int, float, type(None)),
    "str | int | None": (str, int, type(None)),
}


def _type_ok(value: Any, accepted: tuple[type, ...]) -> bool:
    if isinstance(value, bool):
        return bool in accepted
    return isinstance(value, accepted)


def _check_keys(obj: dict, where: str, schema: dict[str, tuple[type, ...]]) -> None:
    for key, value in obj.items():
        if key not in schema:
            raise invalid(f"{where}.{key} is not a known field")
        if not _type_ok(value, schema[key]):
            names = " or ".join("null" if t is type(None) else t.__name__ for t in schema[key])
            raise invalid(f"{where}.{key} must be {names}")


def _describe(accepted: tuple[type, ...]) -> str:
    names = {"str": "a string", "int": "an integer", "float": "a number", "dict": "an object", "NoneType": "null"}
    return " or ".join(names.get(t.__name__, t.__name__) for t in accepted)


def parse_message(raw: str) -> Message:
    """Parse one inbound text frame. Raises ProtocolError(invalid_message) naming the first problem."""
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise invalid(f"malformed JSON: {exc}") from None
    if not isinstance(data, dict):
        raise invalid("a message must be a JSON object with a 'type'")
    kind = data.get("type")
    if not isinstance(kind, str):
        raise invalid("missing field 'type' (a string)")
    cls = MESSAGE_TYPES.get(kind)
    context_id = data.get("context_id") if isinstance(data.get("context_id"), str) else None
    if cls is None:
        raise invalid(f"unknown message type {kind!r}", context_id)
    kwargs: dict[str, Any] = {}
    for f in fields(cls):
        if f.name not in data:
            if f.name not in cls.OPTIONAL:
                raise invalid(f"{kind}: missing field '{f.name}'", context_id)
            continue
        accepted = _JSON_TYPES[str(f.type)]
        value = data[f.name]
        if not _type_ok(value, accepted):
            raise invalid(f"{kind}: field '{f.name}' must be {_describe(accepted)}", context_id)
        kwargs[f.name] = value
    unknown = set(data) - {f.name for f in fields(cls)} - {"type"}
    if unknown:
        raise invalid(f"{kind}: unknown field(s) {', '.join(sorted(unknown))}", context_id)
    msg = cls(**kwargs)
    msg.validate()  # type: ignore[attr-defined]
    return msg

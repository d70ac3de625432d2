"""Wire protocol v1 (docs/protocol.md): inbound message schemas, error codes, close codes, the binary header.

Inbound JSON becomes a typed message here, at the edge (msgspec Structs: strict JSON, so no NaN or Infinity, no
lone surrogates, no integer beyond +-2^53, no nesting where a scalar belongs); everything past this module handles
typed, bounded messages only.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar

import msgspec

PROTOCOL = "voxgate.v1"
TOKEN_SUBPROTOCOL_PREFIX = "voxgate.token."

# Close codes, Starlette-style: the number is in the name.
WS_1000_NORMAL_CLOSURE = 1000
WS_1001_GOING_AWAY = 1001
WS_1008_POLICY_VIOLATION = 1008
WS_1009_MESSAGE_TOO_BIG = 1009
WS_1011_INTERNAL_ERROR = 1011
WS_1013_TRY_AGAIN_LATER = 1013  # this backend's engine is full: retry, on another backend behind a balancer
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

    def __init__(self, code: str, message: str, *, context_id: str | None = None, close_code: int | None = None,
                 param: str | None = None, retry_after_ms: int | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.context_id = context_id
        self.close_code = close_code
        self.param = param  # the one field at fault (a dotted path into the message), when one is
        self.retry_after_ms = retry_after_ms  # engine_full: when asking again may succeed

    @property
    def fatal(self) -> bool:
        return self.close_code is not None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "error", "code": self.code, "message": self.message, "fatal": self.fatal}
        if self.context_id is not None:
            out["context_id"] = self.context_id
        if self.param is not None:
            out["param"] = self.param
        if self.retry_after_ms is not None:
            out["retry_after_ms"] = self.retry_after_ms
        return out

    def __repr__(self) -> str:
        return f"ProtocolError({self.code!r}, {self.message!r}, close_code={self.close_code!r})"


def invalid(message: str, context_id: str | None = None, param: str | None = None) -> ProtocolError:
    return ProtocolError("invalid_message", message, context_id=context_id, param=param)


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
# Each message is a msgspec Struct tagged by its `type`: msgspec checks presence, JSON types and integer bounds while
# decoding (in C, without building an intermediate dict), then `validate()` checks values and reports problems in
# the protocol's words. Nested objects (audio, pacing, defaults, underruns) stay plain dicts of scalars, checked by
# key in `validate()`.

MAX_JSON_INT = 2**53  # the largest integer every JSON peer represents exactly; anything beyond is refused
JsonInt = Annotated[int, msgspec.Meta(ge=-MAX_JSON_INT, le=MAX_JSON_INT)]
Scalar = JsonInt | float | str | bool | None
ScalarMap = dict[str, Scalar]


def _check_context_id(value: str) -> None:
    if not _CONTEXT_ID.match(value):
        raise invalid("context_id must be 1-64 characters from [A-Za-z0-9_.:-]", param="context_id")


def _check_track(value: int) -> None:
    if not 0 <= value < MAX_TRACKS:
        raise invalid(f"track must be within 0..{MAX_TRACKS - 1}", param="track")


def _check_keys(obj: dict, where: str, schema: dict[str, tuple[type, ...]]) -> None:
    """Known keys of a nested object, each of an accepted type (JSON true is not a number)."""
    for key, value in obj.items():
        if key not in schema:
            raise invalid(f"{where}.{key} is not a known field", param=f"{where}.{key}")
        accepted = schema[key]
        if (isinstance(value, bool) and bool not in accepted) or not isinstance(value, accepted):
            names = " or ".join("null" if t is type(None) else t.__name__ for t in accepted)
            raise invalid(f"{where}.{key} must be {names}", param=f"{where}.{key}")


class Message(msgspec.Struct, tag_field="type", forbid_unknown_fields=True, kw_only=True):
    TYPE: ClassVar[str] = ""  # the message's `type`, set from its tag below

    def validate(self) -> None:
        pass


class SessionStart(Message, tag="session.start"):
    protocol: str = PROTOCOL
    audio: ScalarMap = {}
    pacing: ScalarMap = {}
    defaults: ScalarMap = {}
    feedback_interval_ms: JsonInt = 50
    metrics_interval_ms: JsonInt = 0
    timestamps: str = "none"  # "word": word times of each context's audio (docs/protocol.md, Word timestamps)
    # False: no audio waits for its word times; an event may follow its words' frames (docs/protocol.md)
    timestamps_hold: bool = True

    def validate(self) -> None:
        if self.timestamps not in ("none", "word"):
            raise invalid("timestamps must be 'none' or 'word'", param="timestamps")
        if self.protocol != PROTOCOL:
            raise invalid(f"protocol must be {PROTOCOL!r}", param="protocol")
        _check_keys(self.audio, "audio", {"codec": (str,), "sample_rate": (int,), "frame_ms": (int,),
                                          "channels": (int,), "bitrate": (int,)})
        _check_keys(self.pacing, "pacing", {"mode": (str,), "target_buffer_ms": (int, float),
                                            "max_buffer_ms": (int, float)})
        _check_keys(self.defaults, "defaults", {"voice": (str, type(None)), "language": (str, type(None)),
                                                "instruct": (str, type(None)), "model": (str, type(None))})
        if not 10 <= self.feedback_interval_ms <= 1000:
            raise invalid("feedback_interval_ms must be within 10..1000", param="feedback_interval_ms")
        if self.metrics_interval_ms != 0 and not 100 <= self.metrics_interval_ms <= 60_000:
            raise invalid("metrics_interval_ms must be 0 (off) or within 100..60000", param="metrics_interval_ms")


class ContextOpen(Message, tag="context.open"):
    context_id: str
    voice: str | None = None
    language: str | None = None
    instruct: str | None = None
    track: JsonInt = 0
    placement: str = "queue"
    max_audio_ms: JsonInt | None = None

    def validate(self) -> None:
        _check_context_id(self.context_id)
        _check_track(self.track)
        if self.placement not in ("queue", "replace"):
            raise invalid("placement must be 'queue' or 'replace'", self.context_id, "placement")
        if self.max_audio_ms is not None and self.max_audio_ms <= 0:
            raise invalid("max_audio_ms must be positive", self.context_id, "max_audio_ms")


class TextAppend(Message, tag="text.append"):
    context_id: str
    text: str

    def validate(self) -> None:
        _check_context_id(self.context_id)


class ContextFlush(Message, tag="context.flush"):
    context_id: str
    flush_id: str | JsonInt | None = None

    def validate(self) -> None:
        _check_context_id(self.context_id)


class ContextEnd(Message, tag="context.end"):
    context_id: str

    def validate(self) -> None:
        _check_context_id(self.context_id)


class ContextCancel(Message, tag="context.cancel"):
    context_id: str
    played_pts: JsonInt | None = None

    def validate(self) -> None:
        _check_context_id(self.context_id)
        if self.played_pts is not None and self.played_pts < 0:
            raise invalid("played_pts must be >= 0", self.context_id, "played_pts")


class Clear(Message, tag="clear"):
    pass


class Playback(Message, tag="playback"):
    played_pts: JsonInt
    track: JsonInt = 0
    buffered_samples: JsonInt = 0
    underruns: ScalarMap = {}
    output_latency_ms: JsonInt | float = 0
    t_ms: JsonInt | float = 0

    def validate(self) -> None:
        _check_track(self.track)
        for name in ("played_pts", "buffered_samples"):
            if getattr(self, name) < 0:
                raise invalid(f"{name} must be >= 0", param=name)
        _check_keys(self.underruns, "underruns", {"events": (int,), "samples": (int,), "max_gap_ms": (int, float),
                                                  "last_pts": (int,)})
        for key, value in self.underruns.items():
            if value < 0:
                raise invalid("underruns counters must be >= 0", param=f"underruns.{key}")


class Ping(Message, tag="ping"):
    t_ms: JsonInt | float | None = None


MESSAGE_TYPES: dict[str, type[Message]] = {}
for _cls in (SessionStart, ContextOpen, TextAppend, ContextFlush, ContextEnd, ContextCancel, Clear, Playback, Ping):
    _cls.TYPE = _cls.__struct_config__.tag  # type: ignore[assignment]
    MESSAGE_TYPES[_cls.TYPE] = _cls

_decoder = msgspec.json.Decoder(SessionStart | ContextOpen | TextAppend | ContextFlush | ContextEnd | ContextCancel
                                | Clear | Playback | Ping)


class _Envelope(msgspec.Struct):
    """What an invalid message still tells: its type and context, for the error message."""

    type: Any = None
    context_id: Any = None


_envelope = msgspec.json.Decoder(_Envelope)
_AT = re.compile(r"^(.*) - at `\$\.?(.*)`$")


def describe_validation_error(exc: msgspec.ValidationError) -> str:
    """msgspec's message in the protocol's words: `field 'x': expected ...`, `missing field 'x'`, ..."""
    text = str(exc)
    for prefix, words in (("Object missing required field ", "missing field "),
                          ("Object contains unknown field ", "unknown field ")):
        if text.startswith(prefix):
            return words + text[len(prefix):].replace("`", "'")
    match = _AT.match(text)
    if match:
        what, where = match.groups()
        return f"field '{where}': {what[:1].lower()}{what[1:]}"
    return text[:1].lower() + text[1:]


def field_at_fault(exc: msgspec.ValidationError) -> str | None:
    """The field msgspec's message names (`pacing.mode`), if it names one."""
    text = str(exc)
    for prefix in ("Object missing required field ", "Object contains unknown field "):
        if text.startswith(prefix):
            return text[len(prefix):].strip("`")
    match = _AT.match(text)
    return match.group(2) or None if match else None


def parse_message(raw: str | bytes) -> Message:
    """Parse one inbound text frame. Raises ProtocolError(invalid_message) naming the first problem."""
    try:
        msg = _decoder.decode(raw)
    except msgspec.ValidationError as exc:
        raise _invalid_message(raw, exc) from None
    except msgspec.DecodeError as exc:
        raise invalid(f"malformed JSON: {str(exc).removeprefix('JSON is malformed: ')}") from None
    except RecursionError:
        raise invalid("malformed JSON: nested too deeply") from None
    msg.validate()
    return msg


def _invalid_message(raw: str | bytes, exc: msgspec.ValidationError) -> ProtocolError:
    try:
        envelope = _envelope.decode(raw)
    except msgspec.ValidationError:
        return invalid("a message must be a JSON object with a 'type'")
    except msgspec.DecodeError as malformed:  # past the point where the typed decoder stopped
        return invalid(f"malformed JSON: {str(malformed).removeprefix('JSON is malformed: ')}")
    except RecursionError:
        return invalid("malformed JSON: nested too deeply")
    kind = envelope.type
    context_id = envelope.context_id if isinstance(envelope.context_id, str) else None
    if not isinstance(kind, str):
        return invalid("missing field 'type' (a string)", context_id, "type")
    if kind not in MESSAGE_TYPES:
        return invalid(f"unknown message type {kind!r}", context_id, "type")
    return invalid(f"{kind}: {describe_validation_error(exc)}", context_id, field_at_fault(exc))

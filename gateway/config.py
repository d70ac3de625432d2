"""Gateway configuration: typed, validated dataclasses loaded from TOML presets in configs/."""

from __future__ import annotations

import dataclasses
import re
import tomllib
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"
CUDA_INDEX = re.compile(r"^cuda:(0|[1-9]\d*)$")  # `--device cuda:N`


def check_device(device: str) -> None:
    """`--device` (config `device`): empty (none named), `cpu`, `cuda` or `cuda:N`; anything else is a ValueError,
    since the name would otherwise reach the engine and label every metric."""
    if device not in ("", "cpu", "cuda") and CUDA_INDEX.match(device) is None:
        raise ValueError(f"device must be cpu, cuda or cuda:N (N a GPU index such as 0), not {device!r}")


@dataclass(slots=True)
class Limits:
    """Per-session limits, announced in `session.started.limits` and enforced."""

    max_contexts: int = 8
    max_message_bytes: int = 65_536
    max_text_chars: int = 10_000
    max_buffered_text_chars: int = 50_000  # per context: text not yet spoken (docs/protocol.md, Errors and limits)
    max_context_audio_s: float = 600.0
    max_messages_per_s: float = 200.0
    idle_timeout_s: float = 60.0
    max_session_s: float = 3600.0
    slow_consumer_s: float = 5.0  # a socket that takes no message this long: the client is let go
    # Per-session state a client can make the server hold: flushes waiting for their audio (and their ids), and
    # the ids of every context of the session (a context id is never reused).
    max_pending_flushes: int = 64
    max_flush_id_chars: int = 256
    max_session_contexts: int = 10_000

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            if getattr(self, f.name) <= 0:
                raise ValueError(f"limits.{f.name} must be positive")

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(slots=True)
class PacingDefaults:
    mode: str = "client_clock"
    target_buffer_ms: int = 150
    max_buffer_ms: int = 1000
    feedback_interval_ms: int = 50

    def __post_init__(self) -> None:
        if self.mode not in ("client_clock", "asap", "realtime"):
            raise ValueError(f"pacing.mode must be client_clock, asap or realtime, not {self.mode!r}")
        if not 0 < self.target_buffer_ms <= self.max_buffer_ms <= 10_000:
            raise ValueError("pacing needs 0 < target_buffer_ms <= max_buffer_ms <= 10000")


@dataclass(slots=True)
class GatewayConfig:
    host: str = "127.0.0.1"
    port: int = 8000
    engine: str = "espeak"
    engine_options: dict[str, Any] = field(default_factory=dict)
    device: str = ""  # cuda:N, cuda or cpu (`voxgate serve --device`); set: every metric is labelled device="..."
    max_sessions: int = 256
    # Admission (docs/deploy.md, "Load and admission"): a new stream (session, context, HTTP request) is refused at
    # once with `engine_full` and a Retry-After when it would not be served on time, so that the client or the
    # balancer retries on another backend. "deadline": by the engine's forecast (engines without one: admitted),
    # first audio within first_audio_slo_ms and every generating stream at 1x x admission_margin, a share
    # admission_reserve of the slots and load kept for contexts of sessions already speaking; "queue": only
    # max_queued_streams; "off": never. max_queued_streams: with this many engine streams queued and no free row,
    # refused too (deadline and queue modes); counted per engine, all sessions together; 0: no cap.
    admission: str = "deadline"
    first_audio_slo_ms: int = 200
    admission_margin: float = 1.05
    admission_reserve: float = 0.05
    max_queued_streams: int = 0
    agent_port: int = 0  # HAProxy agent check (http/agent_check.py): weight from the load, "drain" when full; 0: off
    auth_tokens: list[str] = field(default_factory=list)  # empty: no auth
    writer_queue_frames: int = 64  # per socket; the brake for slow readers
    ws_deflate: bool = False  # permessage-deflate: costs ~60 us of CPU per PCM frame and saves little on audio
    opus_threads: int = 2  # Opus encoder threads (libopus releases the GIL); 0: encode on the event loop
    serve_demo: bool = True
    gc_freeze: bool = True  # after start-up, freeze what is alive out of the collector's reach
    # "idle": no automatic pass; a full one once nothing is speaking (the request path makes no cycle), or when
    # `gc_busy_limit` tracked objects were made since the last pass; "auto": CPython's own, at gc_gen0_threshold.
    gc_collect: str = "idle"
    gc_busy_limit: int = 500_000
    # gc_collect = "auto" only: young objects per gen-0 pass (CPython's 700 collects too often for a busy loop; each
    # pass costs ~0.3 us per young object, 1-2 ms at 5,000 in the gateway).
    gc_gen0_threshold: int = 5_000
    loop_chunk_turns: int = 4  # engine chunks taken in per event-loop iteration (transport/loop_turns.py); 0: no bound
    # Text streaming (docs/protocol.md, "Text streaming"): "auto" feeds a context's text into one engine stream
    # as it arrives on engines that take it (Engine.supports_text_streaming); "off" keeps sentence mode everywhere.
    # A stream opens on an unfinished sentence only with `text_stream_min_words` words waiting, arriving at
    # `text_stream_min_wps` or faster (Qwen3-TTS takes ~1 text token per 80 ms frame: slower text runs out).
    text_streaming: str = "auto"
    text_stream_min_words: int = 6
    text_stream_min_wps: float = 10.0
    # Word times on an engine that times them per sentence (qwen3tts's aligner): > 0 speaks a turn's first clause
    # (a comma, colon or dash after at least this many words, before its first sentence end) as its own segment,
    # so its words are timed and its audio released before the rest of the sentence is made. 0: off.
    word_times_first_clause_words: int = 0
    shutdown_grace_s: float = 10.0  # SIGTERM: live contexts may finish this long; the process is gone 2 s later
    allowed_origins: list[str] = field(default_factory=list)  # browser origins beyond same-origin and localhost
    allowed_hosts: list[str] = field(default_factory=list)  # Host names beyond IP literals and localhost
    max_request_bytes: int = 262_144  # POST bodies; refused with 413 while reading
    protect_metrics: bool = False  # true: /metrics and /health's details need a token too
    # POST /v1/audio/speech: OpenAI voice names per engine (merged over voices/openai_names.py's tables), model ids
    # accepted besides voxgate and the engine's own, and threads for the mp3/opus/aac/flac encoders (0: on the loop)
    voice_aliases: dict[str, dict[str, str]] = field(default_factory=dict)
    served_model_name: list[str] = field(default_factory=list)  # vLLM's: the model's names, listed first
    model_aliases: list[str] = field(default_factory=lambda: ["tts-1", "tts-1-hd", "gpt-4o-mini-tts",
                                                              "gpt-4o-mini-tts-2025-12-15"])
    speech_encoder_threads: int = 2
    # POST /v1/voices (docs/http-api.md): uploaded voices are kept under voices_dir ("": uploads off); each upload's
    # body, the time it takes to arrive, its recording's length, the uploads handled at once (each holds its body
    # and decoded audio) and how many voices each token (without auth: the server) holds are bounded
    voices_dir: str = ""
    max_voice_upload_bytes: int = 10_485_760
    voice_upload_timeout_s: float = 60.0
    max_concurrent_voice_uploads: int = 2
    min_voice_s: float = 3.0
    max_voice_s: float = 30.0
    max_voices: int = 100
    limits: Limits = field(default_factory=Limits)
    pacing: PacingDefaults = field(default_factory=PacingDefaults)

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ValueError("port must be within 0..65535")
        if self.max_queued_streams < 0:
            raise ValueError("max_queued_streams must be 0 (off) or positive")
        if self.admission not in ("deadline", "queue", "off"):
            raise ValueError(f"admission must be deadline, queue or off, not {self.admission!r}")
        if not 1 <= self.first_audio_slo_ms <= 600_000 or not 0 < self.admission_margin <= 10:
            raise ValueError("first_audio_slo_ms must be within 1..600000 and admission_margin within (0, 10]")
        if not 0 <= self.admission_reserve <= 0.5:
            raise ValueError("admission_reserve must be within 0..0.5")
        if self.max_sessions <= 0 or self.writer_queue_frames <= 0 or self.gc_gen0_threshold <= 0 \
                or self.gc_busy_limit <= 0:
            raise ValueError("max_sessions, writer_queue_frames, gc_gen0_threshold and gc_busy_limit must be positive")
        if self.gc_collect not in ("idle", "auto"):
            raise ValueError("gc_collect must be idle or auto")
        if not 0 <= self.loop_chunk_turns <= 100_000:
            raise ValueError("loop_chunk_turns must be within 0..100000 (0: no bound)")
        if self.text_streaming not in ("auto", "off"):
            raise ValueError(f"text_streaming must be auto or off, not {self.text_streaming!r}")
        if not 1 <= self.text_stream_min_words <= 1000 or not 0 <= self.text_stream_min_wps <= 1000:
            raise ValueError("text_stream_min_words must be within 1..1000 and text_stream_min_wps within 0..1000")
        if not 0 <= self.word_times_first_clause_words <= 100:
            raise ValueError("word_times_first_clause_words must be within 0..100")
        if not 0 <= self.opus_threads <= 64:
            raise ValueError("opus_threads must be within 0..64")
        if not 0 <= self.shutdown_grace_s <= 3600:
            raise ValueError("shutdown_grace_s must be within 0..3600")
        if self.max_request_bytes <= 0:
            raise ValueError("max_request_bytes must be positive")
        for engine, table in self.voice_aliases.items():
            if not isinstance(table, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                      for k, v in table.items()):
                raise ValueError(f"voice_aliases.{engine} must be a table of alias = \"voice id\" strings")
        if not all(name.strip() for name in self.served_model_name):
            raise ValueError("served_model_name must list non-empty names")
        if not 0 <= self.speech_encoder_threads <= 64:
            raise ValueError("speech_encoder_threads must be within 0..64")
        if self.max_voice_upload_bytes <= 0 or self.max_voices <= 0:
            raise ValueError("max_voice_upload_bytes and max_voices must be positive")
        if not 0 < self.voice_upload_timeout_s <= 3600:
            raise ValueError("voice_upload_timeout_s must be positive and at most 3600")
        if not 1 <= self.max_concurrent_voice_uploads <= 64:
            raise ValueError("max_concurrent_voice_uploads must be within 1..64")
        if not 0 < self.min_voice_s <= self.max_voice_s <= 600:
            raise ValueError("voice uploads need 0 < min_voice_s <= max_voice_s <= 600")
        if self.protect_metrics and not self.auth_tokens:
            raise ValueError("protect_metrics needs auth_tokens (the token that /metrics will require)")
        check_device(self.device)


_TYPE_NAMES = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def _typed(value: Any, hint: Any, key: str) -> Any:
    """`value` as the field's type (an int where a float is due becomes a float), or a ValueError naming the key."""
    origin = typing.get_origin(hint)
    if origin is list:
        if not isinstance(value, list):
            raise ValueError(f"{key} must be a list, not {value!r}")
        return [_typed(item, typing.get_args(hint)[0], f"{key}[{i}]") for i, item in enumerate(value)]
    if origin is dict or hint is Any:
        if origin is dict and not isinstance(value, dict):
            raise ValueError(f"{key} must be a table, not {value!r}")
        return value
    ok = isinstance(value, hint) and (hint is bool or not isinstance(value, bool))
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not ok:
        raise ValueError(f"{key} must be {_TYPE_NAMES.get(hint, hint)}, not {value!r}")
    return value


def _build(cls: type, data: dict[str, Any], where: str, prefix: str = "") -> Any:
    known = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ValueError(f"unknown key(s) in {where}: {', '.join(prefix + k for k in unknown)}")
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for name, value in data.items():
        nested = {"limits": Limits, "pacing": PacingDefaults}.get(name) if cls is GatewayConfig else None
        if nested is not None:
            if not isinstance(value, dict):
                raise ValueError(f"{where}: {prefix}{name} must be a table")
            value = _build(nested, value, where, f"{prefix}{name}.")
        else:
            try:
                value = _typed(value, hints[name], prefix + name)
            except ValueError as exc:
                raise ValueError(f"{where}: {exc}") from None
        kwargs[name] = value
    try:
        return cls(**kwargs)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def config_from_dict(data: dict[str, Any], where: str = "config") -> GatewayConfig:
    return _build(GatewayConfig, data, where)


def config_path(path_or_preset: str | Path) -> Path:
    """A TOML file, or a preset by exact name from configs/ (`default`, `qwen3tts`, ...)."""
    path = Path(path_or_preset)
    if path.exists():
        return path
    preset = CONFIG_DIR / f"{path_or_preset}.toml"
    if not preset.exists():
        names = sorted(p.stem for p in CONFIG_DIR.glob("*.toml"))
        raise FileNotFoundError(f"no config file {str(path)!r} and no preset of that name (presets: {names})")
    return preset


def load_config(path_or_preset: str | Path | None = None, **overrides: Any) -> GatewayConfig:
    """Load a TOML file, or a preset by exact name from configs/ (`default`, `dev`, ...), then apply overrides."""
    data: dict[str, Any] = {}
    if path_or_preset is not None:
        path = config_path(path_or_preset)
        with path.open("rb") as f:
            data = tomllib.load(f)
        where = str(path)
    else:
        where = "config"
    data.update({k: v for k, v in overrides.items() if v is not None})
    return config_from_dict(data, where)

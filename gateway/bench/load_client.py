"""One request through the gateway, timed the listener's way: over the WebSocket (`/v1/tts/ws`, pacing `asap`)
or over `POST /v1/audio/speech`. Each request fills a `Trace` as frames arrive, so a cancelled request keeps
what it had received."""

from __future__ import annotations

import asyncio
import itertools
import json
import struct
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from voxgate.client.message_pacer import MessagePacer

from ..protocol import WS_1013_TRY_AGAIN_LATER, WS_4029_TOO_MANY_SESSIONS

FRAME_HEADER = struct.Struct("<BBHIIHHQ")  # version, codec, flags, ctx, seq, track, samples, pts (docs/protocol.md)
HTTP_SAMPLE_RATE = 24_000  # POST /v1/audio/speech streams PCM16 mono 24 kHz
DEFAULT_VOICE_BODY = "default"


class ServerError(Exception):
    """A fatal error from the server or a broken connection: the client must be replaced."""


class Refused(ServerError):
    """A new session refused for load (`engine_full` or `too_many_sessions`, or close 1013 or 4029): no request was
    served.
    `retry_after_s`: the refusal's `retry_after_ms`, when it said one."""

    def __init__(self, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


REFUSAL_CODE = "engine_full"  # the gateway's answer past capacity: HTTP 503, a WebSocket error or close 1013
# A new session is refused for load by either limit: the engine's (engine_full, 1013) or the gateway's session cap
# (too_many_sessions, 4029; docs/protocol.md). Both say "retry later"; neither served a request.
SESSION_REFUSALS = {REFUSAL_CODE: WS_1013_TRY_AGAIN_LATER, "too_many_sessions": WS_4029_TOO_MANY_SESSIONS}


@dataclass(slots=True)
class Trace:
    """The client's view of one request. Times are `time.perf_counter()` seconds."""

    text_index: int
    words: int
    max_audio_ms: int | None
    scheduled: float  # when the load shape wanted the request sent
    sent: float | None = None  # when the text that made it speakable was written
    first_audio: float | None = None
    done: float | None = None
    chunks: list[tuple[float, float]] = field(default_factory=list)  # (arrival, duration_s) per frame or body chunk
    error: str | None = None
    server_first_audio_ms: float | None = None  # context.done.timing.first_audio_ms (WebSocket only)
    server_stages_ms: dict[str, float] | None = None  # context.done.timing.first_audio_stages_ms (WebSocket only)
    server_stalls: dict[str, Any] | None = None
    refusal_s: float | None = None  # refused (engine_full): seconds from sending to the refusal; not an error
    retry_after_s: float | None = None  # the refusal's retry_after_ms (Retry-After over HTTP), in seconds
    timed_words: int | None = None  # words in `timestamps` events (sessions with word timestamps), else None
    # per timed word: (its event's arrival, its start in audio seconds, chunks received before its event)
    word_times: list[tuple[float, float, int]] = field(default_factory=list)
    paced_s: float = 0.0  # waited before sending, to keep within the session's limits.max_messages_per_s

    @property
    def refused(self) -> bool:
        return self.refusal_s is not None

    @property
    def ok(self) -> bool:
        return self.error is None and self.done is not None

    @property
    def ttfa_s(self) -> float | None:
        if self.sent is None or self.first_audio is None:
            return None
        return self.first_audio - self.sent


class Client(Protocol):
    async def speak(self, trace: Trace, text: str) -> None: ...
    async def close(self) -> None: ...


class WsClient:
    """One WebSocket session; one context at a time (a user who waits for the reply before the next). Its messages
    keep within the session's message limit (MessagePacer); the time that takes is each request's `paced_s`, spent
    before its text goes, so first audio does not count it."""

    _ids = itertools.count(1)

    def __init__(self, ws: Any, started: dict[str, Any], text_wps: float | None = None) -> None:
        self.ws = ws
        self.started = started
        self.rate = int(started["audio"]["sample_rate"])
        self.text_wps = text_wps  # set: the text goes word by word at this rate (an LLM's output), not at once
        self.timestamps = started.get("timestamps") == "word"  # the session's contexts get word timestamps
        self.pacer = MessagePacer((started.get("limits") or {}).get("max_messages_per_s"))

    @classmethod
    async def connect(cls, url: str, frame_ms: int = 20, voice: str | None = None, deflate: bool = False,
                      codec: str = "pcm_s16le", text_wps: float | None = None, timestamps: bool = False,
                      timestamps_hold: bool | None = None) -> WsClient:
        """`deflate`: offer permessage-deflate (off by default: compressing PCM costs both sides CPU and no audio
        client needs it). `timestamps`: ask for word timestamps; a server that has none is an error (the run would
        measure something else than asked). `timestamps_hold` (with `timestamps`): sent as session.start's
        `timestamps_hold` (None: not sent, the server's default). A server that would not hold where `true` was
        asked is an error; one that answers `true` to `false` times words as it speaks (espeak, the fake engine),
        where every event comes before its audio and nothing waits for it either way, and is measured as asked."""
        from websockets.asyncio.client import connect

        ws = await connect(
            url,
            subprotocols=["voxgate.v1"],
            max_size=None,
            ping_interval=None,
            open_timeout=30,
            compression="deflate" if deflate else None,
        )
        start: dict[str, Any] = {
            "type": "session.start",
            "protocol": "voxgate.v1",
            "audio": {"codec": codec, "frame_ms": frame_ms,
                      **({"sample_rate": 24_000} if codec == "pcm_s16le" else {})},
            "pacing": {"mode": "asap"},
        }
        if voice:
            start["defaults"] = {"voice": voice}
        if timestamps:
            start["timestamps"] = "word"
            if timestamps_hold is not None:
                start["timestamps_hold"] = timestamps_hold
        from websockets.exceptions import ConnectionClosed

        while True:
            try:  # a refused session is closed at once, maybe before session.start is even sent
                if start:
                    await ws.send(json.dumps(start))
                    start = {}
                msg = await ws.recv()
            except ConnectionClosed as exc:
                if exc.rcvd is not None and exc.rcvd.code in SESSION_REFUSALS.values():
                    raise Refused(f"session refused: close {exc.rcvd.code} {exc.rcvd.reason}") from None
                raise
            if isinstance(msg, bytes):
                continue
            data = json.loads(msg)
            if data.get("type") == "session.started":
                if timestamps and data.get("timestamps") != "word":
                    await ws.close()
                    raise ServerError(f"no word timestamps: {data.get('timestamps_unavailable')}")
                if timestamps and timestamps_hold and data.get("timestamps_hold") is not True:
                    await ws.close()
                    raise ServerError(f"timestamps_hold {json.dumps(timestamps_hold)} asked, session.started says "
                                      f"{json.dumps(data.get('timestamps_hold'))}")
                return cls(ws, data, text_wps)
            if data.get("type") == "error":
                await ws.close()
                message = f"session.start refused: {data.get('code')}: {data.get('message')}"
                if data.get("code") in SESSION_REFUSALS:
                    raise Refused(message, _seconds(data.get("retry_after_ms"), 1e-3))
                raise ServerError(message)

    async def speak(self, trace: Trace, text: str) -> None:
        ws = self.ws
        cid = f"b{next(self._ids)}"
        opening: dict[str, Any] = {"type": "context.open", "context_id": cid}
        if trace.max_audio_ms is not None:
            opening["max_audio_ms"] = trace.max_audio_ms
        writer: asyncio.Task[None] | None = None
        if self.timestamps:
            trace.timed_words = 0
        try:
            # the whole request's messages at once (open, text, end), or with the text word by word the open now
            trace.paced_s = await self.pacer.take(1 if self.text_wps else 3)
            opened = time.perf_counter()
            await ws.send(json.dumps(opening))
            end = json.dumps({"type": "context.end", "context_id": cid})
            if self.text_wps:  # TTFA counts from the first word: what a listener of an LLM agent waits
                trace.sent = time.perf_counter()
                writer = asyncio.get_running_loop().create_task(self._words(cid, text, trace.sent))
            else:
                trace.sent = time.perf_counter()
                await ws.send(json.dumps({"type": "text.append", "context_id": cid, "text": text}))
                await ws.send(end)
            while True:
                msg = await ws.recv()
                now = time.perf_counter()
                if isinstance(msg, bytes):
                    samples = FRAME_HEADER.unpack_from(msg, 0)[6]
                    if not samples:  # an empty LAST frame: no audio
                        continue
                    if trace.first_audio is None:
                        trace.first_audio = now
                    trace.chunks.append((now, samples / self.rate))
                    continue
                data = json.loads(msg)
                kind = data.get("type")
                if kind == "timestamps" and trace.timed_words is not None and data.get("context_id") == cid:
                    received = len(trace.chunks)  # whether a word's audio came first is told by order, not clock
                    trace.word_times += [(now, w["start_ms"] / 1e3, received) for w in data["words"]]
                    trace.timed_words += len(data["words"])
                    continue
                if kind == "context.done" and data.get("context_id") == cid:
                    trace.done = now
                    timing = data.get("timing") or {}
                    trace.server_first_audio_ms = timing.get("first_audio_ms")
                    trace.server_stages_ms = timing.get("first_audio_stages_ms")
                    trace.server_stalls = data.get("stalls")
                    return
                if kind == "context.cancelled" and data.get("context_id") == cid:
                    trace.error = "cancelled"
                    return
                if kind == "error":
                    if data.get("fatal"):
                        raise ServerError(f"fatal {data.get('code')}: {data.get('message')}")
                    if data.get("context_id") == cid and data.get("code") == REFUSAL_CODE:
                        trace.refusal_s = now - opened  # the context was never opened: nothing more comes
                        trace.retry_after_s = _seconds(data.get("retry_after_ms"), 1e-3)
                        return
                    if data.get("context_id") in (cid, None):
                        trace.error = f"{data.get('code')}: {data.get('message')}"
                        if data.get("code") != "synthesis_failed":  # synthesis_failed is followed by context.done
                            return
        except ServerError as exc:
            trace.error = str(exc)
            raise
        except Exception as exc:  # a closed connection: this client is gone
            trace.error = f"{type(exc).__name__}: {exc}"
            raise ServerError(trace.error) from exc
        finally:
            if writer is not None:
                writer.cancel()

    async def _words(self, cid: str, text: str, start: float) -> None:
        """The text one word a message at `text_wps`, on a schedule from `start` (no drift), then the end."""
        assert self.text_wps
        words = text.split(" ")
        for i, word in enumerate(words):
            await asyncio.sleep(max(0.0, start + i / self.text_wps - time.perf_counter()))
            piece = word + (" " if i + 1 < len(words) else "")
            await self.pacer.take()
            await self.ws.send(json.dumps({"type": "text.append", "context_id": cid, "text": piece}))
        await self.pacer.take()
        await self.ws.send(json.dumps({"type": "context.end", "context_id": cid}))

    async def close(self) -> None:
        try:
            await self.ws.close()
        except Exception:
            pass


class HttpClient:
    """`POST /v1/audio/speech` with `stream: true`, `response_format: pcm`; first audio = first body byte."""

    def __init__(self, http: Any, voice: str | None = None) -> None:
        self.http = http
        self.voice = voice

    async def speak(self, trace: Trace, text: str) -> None:
        body: dict[str, Any] = {
            "model": "voxgate",
            "input": text,
            "voice": self.voice or DEFAULT_VOICE_BODY,
            "response_format": "pcm",
            "stream": True,
        }
        if trace.max_audio_ms is not None:
            body["max_audio_ms"] = trace.max_audio_ms
        received = 0  # bytes; a chunk may end mid-sample
        try:
            trace.sent = time.perf_counter()
            async with self.http.stream("POST", "/v1/audio/speech", json=body) as resp:
                if resp.status_code != 200:
                    answered = time.perf_counter()
                    body = await resp.aread()
                    if resp.status_code == 503 and _error_code(body) == REFUSAL_CODE:
                        trace.refusal_s = answered - trace.sent
                        trace.retry_after_s = _seconds(resp.headers.get("retry-after"), 1.0)
                    else:
                        trace.error = f"HTTP {resp.status_code}: {body[:200]!r}"
                    return
                async for chunk in resp.aiter_raw():
                    now = time.perf_counter()
                    if not chunk:
                        continue
                    if trace.first_audio is None:
                        trace.first_audio = now
                    before = received // 2
                    received += len(chunk)
                    trace.chunks.append((now, (received // 2 - before) / HTTP_SAMPLE_RATE))
            trace.done = time.perf_counter()
        except Exception as exc:
            trace.error = f"{type(exc).__name__}: {exc}"

    async def close(self) -> None:  # the shared httpx client is closed by its owner
        return None


def _seconds(value: Any, unit: float) -> float | None:
    """A retry hint (milliseconds in a WebSocket error, seconds in Retry-After) in seconds; None if absent or bad."""
    try:
        return max(0.0, float(value) * unit) if value is not None else None
    except (TypeError, ValueError):
        return None


def _error_code(body: bytes) -> str | None:
    """The `error.code` of an OpenAI-shaped error body, if it is one."""
    try:
        error = json.loads(body).get("error")
    except (ValueError, AttributeError):
        return None
    return error.get("code") if isinstance(error, dict) else None

"""The speech WebSocket `/v1/audio/speech/ws` (subprotocol `nari.speech.v1`, the WebSocket mode of nari-labs
tts-bench): one request per connection, its text sent as it is written, its audio back as binary PCM16 24 kHz.

The request is checked as `POST /v1/audio/speech` checks it (speech_request.check) and spoken by the same producer
(pcm_producer.spoken_pcm), with text streaming where the engine takes it (as a `/v1/tts/ws` context). The exchange:
`session.created` -> `request.start` -> `request.configured`; `input_text.append {sequence, text}` and
`input_text.end {sequence}`, each answered by `input_text.ack {event, sequence}`; `response.started {request_id,
audio}`, binary frames, `response.done {request_id, stop_reason, audio_chunks}`, and the server closes (1000).
`response.cancel` ends it at once. docs/http-api.md has the details.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
from typing import Any

import msgspec
from starlette.websockets import WebSocket, WebSocketDisconnect
from voxgate.engine.base import SAMPLE_RATE
from voxgate.gateway.protocol import (
    WS_1000_NORMAL_CLOSURE,
    WS_1001_GOING_AWAY,
    WS_1008_POLICY_VIOLATION,
    WS_1011_INTERNAL_ERROR,
    WS_1013_TRY_AGAIN_LATER,
    WS_4001_UNAUTHORIZED,
    WS_4008_TIMEOUT,
)
from voxgate.gateway.session.context import Context
from voxgate.gateway.session.context_text import ContextText
from voxgate.gateway.session.pcm_producer import pcm_context, spoken_pcm
from voxgate.gateway.session.state import GatewayState
from voxgate.gateway.transport.auth import token_from_websocket

from .errors import ENGINE_ERROR_STATUS
from .speech_request import SpeechError, SpeechJob, check, decode_body

log = logging.getLogger("voxgate.http")
SPEECH_PROTOCOL = "nari.speech.v1"
AUDIO = {"encoding": "pcm_s16le", "sample_rate": SAMPLE_RATE, "channels": 1}
# check() judges a whole request; here the text comes later, so a stand-in takes its place while the options are
# checked at request.start (the text's own limit is applied as it arrives).
_TEXT_TO_COME = "-"


class Refusal(Exception):
    """An `error` event (OpenAI's error object) and the close code that follows it."""

    def __init__(self, code: str, message: str, param: str | None = None,
                 close_code: int = WS_1008_POLICY_VIOLATION, retry_after_ms: int | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.param, self.close_code = code, message, param, close_code
        self.retry_after_ms = retry_after_ms  # engine_full: when asking again may succeed

    def event(self) -> dict[str, Any]:
        kind = "server_error" if self.close_code in (WS_1011_INTERNAL_ERROR, WS_1013_TRY_AGAIN_LATER) \
            else "invalid_request_error"
        error = {"message": self.message, "type": kind, "code": self.code, "param": self.param}
        if self.retry_after_ms is not None:
            error["retry_after_ms"] = self.retry_after_ms
        return {"type": "error", "error": error}


class SpeechSocket:
    """One connection: sends serialized (acks and audio come from two tasks), messages read as JSON objects."""

    def __init__(self, websocket: WebSocket, state: GatewayState) -> None:
        self.websocket, self.state = websocket, state
        self._sending = asyncio.Lock()

    async def send(self, event: dict[str, Any] | bytes) -> None:
        async with self._sending:
            if isinstance(event, bytes):
                await self.websocket.send_bytes(event)
            else:
                await self.websocket.send_text(json.dumps(event, separators=(",", ":")))

    async def receive(self, timeout_s: float | None) -> dict[str, Any]:
        limits = self.state.config.limits
        try:
            async with asyncio.timeout(timeout_s):
                message = await self.websocket.receive()
        except TimeoutError:
            raise Refusal("idle_timeout", f"no message for {timeout_s:g} s", close_code=WS_4008_TIMEOUT) from None
        if message["type"] == "websocket.disconnect":
            raise WebSocketDisconnect(message.get("code", 1000))
        text = message.get("text")
        if text is None:
            raise Refusal("invalid_message", "binary frames are server-to-client only")
        if len(text.encode("utf-8")) > limits.max_message_bytes:
            raise Refusal("message_too_large", f"message over limits.max_message_bytes ({limits.max_message_bytes})")
        try:
            value = json.loads(text)
        except ValueError:
            raise Refusal("invalid_json", "a message must be a JSON object") from None
        if not isinstance(value, dict) or not isinstance(value.get("type"), str):
            raise Refusal("invalid_message", "a message must be a JSON object with a string `type`", "type")
        return value


def _refusal(state: GatewayState, token: str | None) -> Refusal | None:
    """The gateway-wide reasons not to take a request (as POST /v1/audio/speech and /v1/tts/ws have them)."""
    if not state.authorized(token):
        return Refusal("unauthorized", "a valid token is required", close_code=WS_4001_UNAUTHORIZED)
    if state.drain.draining:
        return Refusal("shutting_down", "the server is shutting down", close_code=WS_1001_GOING_AWAY)
    if not state.engine.ready:
        return Refusal("not_ready", "the engine is still loading; retry shortly", close_code=WS_1013_TRY_AGAIN_LATER)
    refused = state.admission.check("speech_ws")
    if refused is not None:
        return Refusal("engine_full", "the engine is full; retry later or elsewhere",
                       close_code=WS_1013_TRY_AGAIN_LATER, retry_after_ms=refused.retry_after_ms)
    return None


def _job(start: dict[str, Any], state: GatewayState, token: str | None) -> SpeechJob:
    """`request.start`'s fields (those of POST /v1/audio/speech but `input`), checked as HTTP checks them."""
    fields = {k: v for k, v in start.items() if k != "type"}
    if "input" in fields:
        raise Refusal("unknown_field", "input: send the text in input_text.append messages", "input")
    if fields.get("timestamps", "none") != "none":  # (check() would point at SSE, which this socket has not)
        raise Refusal("unsupported_field", "timestamps: this socket sends no word times (POST /v1/audio/speech with "
                      "stream_format sse or stream false, or /v1/tts/ws, does)", "timestamps")
    fields.setdefault("response_format", "pcm")
    try:
        body = decode_body(json.dumps(fields).encode())
        job = check(msgspec.structs.replace(body, input=_TEXT_TO_COME), state, state.uploaded_ids(token))
    except SpeechError as exc:
        raise Refusal(exc.code, exc.message, exc.param) from None
    if job.format != "pcm":
        raise Refusal("unsupported_format", "response_format: this socket sends pcm only", "response_format")
    if job.mode != "audio":
        param = "stream_format" if body.stream_format is not None else "stream"
        raise Refusal("unsupported_field", f"{param}: this socket streams binary audio only", param)
    return job


async def _read_text(socket: SpeechSocket, context: Context) -> None:
    """Text pieces into the context, each acknowledged, until input_text.end; then only response.cancel (returns)."""
    limits = socket.state.config.limits
    sequence, chars, ended = 0, 0, False
    while True:
        message = await socket.receive(None if ended else limits.idle_timeout_s)
        kind = message["type"]
        if kind == "response.cancel":
            return
        if kind not in ("input_text.append", "input_text.end") or ended:
            raise Refusal("invalid_message", f"{kind!r} is not expected here", "type")
        got = message.get("sequence")
        if type(got) is not int or got != sequence:  # (not True for 1)
            raise Refusal("invalid_sequence", f"sequence: {sequence} expected, not {got!r}", "sequence")
        if kind == "input_text.end":
            ended = True
            await socket.send({"type": "input_text.ack", "event": kind, "sequence": sequence})
            context.end()  # after the ack: response.done can only follow it
            continue
        text = message.get("text")
        if not isinstance(text, str) or not text:  # never empty: the text limit also bounds the message count
            raise Refusal("invalid_value", "text: a non-empty string is required", "text")
        chars += len(text)
        if chars > limits.max_text_chars:
            raise Refusal("text_too_long", f"text: over limits.max_text_chars ({limits.max_text_chars})", "text")
        context.append_text(text)
        await socket.send({"type": "input_text.ack", "event": kind, "sequence": sequence})
        sequence += 1


async def _send_audio(socket: SpeechSocket, context: Context) -> None:
    """The audio as binary frames between response.started and response.done; an engine failure is an error."""
    errors: list[str] = []
    request_id = f"speech_{secrets.token_hex(8)}"
    started = {"type": "response.started", "request_id": request_id, "audio": AUDIO}
    chunks = 0
    pieces = spoken_pcm(context, socket.state.engine, errors)
    try:
        async for piece in pieces:
            if not chunks:
                await socket.send(started)
            await socket.send(piece)
            chunks += 1
    finally:
        await pieces.aclose()
    if errors:  # the engine refused (a client's fault, as HTTP's 4xx for it) or failed
        code = errors[0].partition(":")[0]
        close_code = WS_1008_POLICY_VIOLATION if ENGINE_ERROR_STATUS.get(code, 500) < 500 else WS_1011_INTERNAL_ERROR
        raise Refusal(code, "; ".join(errors), close_code=close_code)
    if not chunks:
        await socket.send(started)
    await socket.send({"type": "response.done", "request_id": request_id, "stop_reason": "stop",
                       "audio_chunks": chunks})


async def speech_websocket(websocket: WebSocket) -> None:
    state: GatewayState = websocket.app.state.voxgate
    offered = websocket.scope.get("subprotocols") or []
    await websocket.accept(subprotocol=SPEECH_PROTOCOL if SPEECH_PROTOCOL in offered else None)
    socket, token = SpeechSocket(websocket, state), token_from_websocket(websocket)
    tasks: list[asyncio.Task[None]] = []
    admitted = None
    try:
        refused = _refusal(state, token)
        if refused is not None:
            raise refused
        admitted = state.admission.admit()  # counted ahead of later streams until its engine stream opens
        await socket.send({"type": "session.created", "protocol": SPEECH_PROTOCOL, "audio": AUDIO})
        start = await socket.receive(state.config.limits.idle_timeout_s)
        if start["type"] != "request.start":
            raise Refusal("invalid_message", f"request.start expected, not {start['type']!r}", "type")
        job = _job(start, state, token)
        context = pcm_context(job.voice, job.language, job.instruct, job.budget_samples, state.turns,
                              admitted=admitted)
        if state.config.text_streaming == "auto" and state.engine.supports_text_streaming:
            context.feed = ContextText(state.config.text_stream_min_words, state.config.text_stream_min_wps)
        await socket.send({"type": "request.configured", "model": start.get("model"), "voice": job.voice,
                           "language": job.language, "response_format": "pcm", "audio": AUDIO})
        loop = asyncio.get_running_loop()
        state.drain.http_streams += 1  # a shutdown lets a configured request finish within the grace
        tasks = [loop.create_task(_read_text(socket, context)), loop.create_task(_send_audio(socket, context))]
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            task.result()  # a refusal or a departed client, from either side
        await _close(socket, WS_1000_NORMAL_CLOSURE)  # response.done was sent, or the client cancelled
    except Refusal as exc:
        state.metrics.errors.labels(exc.code).inc()
        await _close(socket, exc.close_code, exc)
    except WebSocketDisconnect:
        pass
    except Exception:
        log.exception("the speech WebSocket failed")
        state.metrics.errors.labels("internal_error").inc()
        await _close(socket, WS_1011_INTERNAL_ERROR,
                     Refusal("internal_error", "internal error", close_code=WS_1011_INTERNAL_ERROR))
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if tasks:
            state.drain.http_streams -= 1
        if admitted is not None:
            admitted()  # (idempotent: released already if its stream opened)


async def _close(socket: SpeechSocket, code: int, refusal: Refusal | None = None) -> None:
    """The refusal's error event (if any), then the close; a client that already left is not an error."""
    try:
        if refusal is not None:
            await socket.send(refusal.event())
        await socket.websocket.close(code, refusal.code if refusal is not None else "")
    except (RuntimeError, OSError, WebSocketDisconnect):
        pass

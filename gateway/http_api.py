"""HTTP endpoints: OpenAI-compatible speech, voices, health, metrics."""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import AsyncIterator

import msgspec
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from voxgate.engine.base import SAMPLE_RATE

from .auth import token_from_request
from .context import synthesize_pcm
from .logfilters import AlreadyLogged
from .protocol import JsonInt, describe_validation_error
from .state import GatewayState
from .voices import resolve_voice

log = logging.getLogger("voxgate.http")


def _error(status: int, message: str, code: str, kind: str = "invalid_request_error",
           close: bool = False) -> JSONResponse:
    """An OpenAI-shaped error. `close`: the connection is not kept (an unread body, a shutdown)."""
    return JSONResponse({"error": {"message": message, "type": kind, "code": code}}, status_code=status,
                        headers={"Connection": "close"} if close else None)


def wav_header_open_ended(sample_rate: int = SAMPLE_RATE) -> bytes:
    """A PCM16 mono WAV header whose RIFF and data sizes say 'unknown' (0xFFFFFFFF), for streaming."""
    byte_rate = sample_rate * 2
    return (b"RIFF" + struct.pack("<I", 0xFFFFFFFF) + b"WAVEfmt " + struct.pack("<IHHIIHH", 16, 1, 1, sample_rate,
            byte_rate, 2, 16) + b"data" + struct.pack("<I", 0xFFFFFFFF))


class SpeechBody(msgspec.Struct, forbid_unknown_fields=True):
    """The body of POST /v1/audio/speech (OpenAI's shape, plus language, instruct and a length budget)."""

    input: str | None = None
    model: str | None = None
    voice: str | None = None
    response_format: str = "pcm"
    stream: bool = True
    speed: JsonInt | float = 1.0
    language: str | None = None
    instruct: str | None = None
    max_audio_ms: JsonInt | None = None


_body_decoder = msgspec.json.Decoder(SpeechBody)


def _decode_body(raw: bytes) -> SpeechBody | JSONResponse:
    try:
        return _body_decoder.decode(raw)
    except msgspec.ValidationError as exc:
        text = describe_validation_error(exc)
        if text.startswith("expected `object`"):
            return _error(400, "the body must be a JSON object", "invalid_json")
        return _error(400, text, "unknown_field" if text.startswith("unknown field") else "invalid_type")
    except msgspec.DecodeError as exc:
        return _error(400, f"the body must be JSON: {str(exc).removeprefix('JSON is malformed: ')}", "invalid_json")
    except RecursionError:
        return _error(400, "the body must be JSON: nested too deeply", "invalid_json")


async def _read_body(request: Request, limit: int) -> bytes | None:
    """The body, read while counting: None as soon as it is (or is declared) over `limit` bytes."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and (len(declared) > 18 or int(declared) > limit):  # (int() of 4300+ digits raises)
        return None
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            return None
    return bytes(body)


async def speech(request: Request) -> Response:
    state: GatewayState = request.app.state.voxgate
    try:
        response = await _speech(request, state)
    except ClientDisconnect:
        response = _error(400, "the client closed the request", "client_disconnected")
    except Exception:
        log.exception("POST /v1/audio/speech failed")
        state.metrics.errors.labels("internal_error").inc()
        response = _error(500, "internal error", "internal_error", "server_error")
    state.metrics.http_requests.labels(str(response.status_code)).inc()
    return response


async def _speech(request: Request, state: GatewayState) -> Response:
    metrics = state.metrics
    if not state.authorized(token_from_request(request)):
        return _error(401, "a valid bearer token is required", "unauthorized", "authentication_error")
    if state.drain.draining:
        return _error(503, "the server is shutting down", "shutting_down", "server_error", close=True)
    if not state.engine.ready:
        return _error(503, "the engine is warming up", "not_ready", "server_error")
    media_type = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media_type != "application/json":  # also a CSRF guard: cross-site pages cannot send JSON without a preflight
        return _error(415, "the body must be JSON with Content-Type: application/json", "unsupported_media_type")
    t_request = time.monotonic()
    limit = state.config.max_request_bytes
    raw = await _read_body(request, limit)
    if raw is None:
        return _error(413, f"the body is over max_request_bytes ({limit})", "request_too_large", close=True)
    body = _decode_body(raw)
    if isinstance(body, JSONResponse):
        return body
    text = body.input
    if not text or not text.strip():
        return _error(400, "'input' is required and must not be empty", "missing_input")
    if len(text) > state.config.limits.max_text_chars:
        return _error(413, f"'input' is over {state.config.limits.max_text_chars} characters", "text_too_long")
    fmt = body.response_format
    if fmt not in ("pcm", "wav"):
        return _error(400, "response_format must be 'pcm' or 'wav'", "unsupported_format")
    if body.speed != 1.0:
        return _error(400, "only speed 1.0 is offered", "unsupported_speed")
    requested = body.voice or state.engine.default_voice()
    voice = resolve_voice(state.engine, requested) if requested else None
    if voice is None:
        missing = f"voice {requested!r} not found" if requested else "this engine has no voice to default to; name one"
        return _error(404, f"{missing}; see GET /v1/voices", "voice_not_found")
    limit_ms = int(state.config.limits.max_context_audio_s * 1000)
    budget_ms = min(limit_ms, body.max_audio_ms if body.max_audio_ms is not None else limit_ms)
    if budget_ms <= 0:
        return _error(400, "max_audio_ms must be positive", "invalid_value")

    errors: list[str] = []

    async def audio() -> AsyncIterator[bytes]:
        state.drain.http_streams += 1  # a shutdown lets it finish within the grace
        try:
            if fmt == "wav":
                yield wav_header_open_ended()
            first = True
            async for data in synthesize_pcm(state.engine, text, voice, body.language, body.instruct,
                                             budget_ms * SAMPLE_RATE // 1000, errors, state.turns):
                if first:
                    metrics.first_audio.labels("http").observe(time.monotonic() - t_request)
                    first = False
                metrics.bytes_out.labels("http").inc(len(data))
                metrics.audio_seconds.labels("http").inc(len(data) / 2 / SAMPLE_RATE)
                yield data
        finally:
            state.drain.http_streams -= 1
        for error in errors:
            metrics.errors.labels(error.partition(":")[0]).inc()

    media = "audio/wav" if fmt == "wav" else "audio/pcm"
    headers = {"X-Sample-Rate": str(SAMPLE_RATE), "X-Channels": "1", "Cache-Control": "no-store"}
    if body.stream:
        return StreamingResponse(_cut_on_engine_error(audio(), errors), media_type=media, headers=headers)
    data = b"".join([piece async for piece in audio()])
    if errors and len(data) <= 44:
        return _error(500, "; ".join(errors), "synthesis_failed", "server_error")
    if errors:  # what could be spoken, and why the rest is missing
        headers["X-Synthesis-Errors"] = "; ".join(errors)[:1000].encode("ascii", "replace").decode()
    if fmt == "wav":  # a complete file: real sizes
        data = data[:4] + struct.pack("<I", len(data) - 8) + data[8:40] + struct.pack("<I", len(data) - 44) + data[44:]
    return Response(data, media_type=media, headers=headers)


async def _cut_on_engine_error(pieces: AsyncIterator[bytes], errors: list[str]) -> AsyncIterator[bytes]:
    """A stream whose engine failed on a segment is cut after the rest (no final chunk): no client takes it for
    complete."""
    async for piece in pieces:
        yield piece
    if errors:
        log.warning("speech stream incomplete: %s", "; ".join(errors))
        raise AlreadyLogged("; ".join(errors))


async def voices(request: Request) -> JSONResponse:
    state: GatewayState = request.app.state.voxgate
    return JSONResponse({"voices": [v.to_json() for v in state.engine.voices()],
                         "default": state.engine.default_voice()})


async def health(request: Request) -> JSONResponse:
    """200 once the engine is warm; 503 while it warms up and from the first moment of a shutdown (draining)."""
    state: GatewayState = request.app.state.voxgate
    if state.drain.draining:
        status, code = "draining", 503
    else:
        status, code = ("ok", 200) if state.engine.ready else ("starting", 503)
    body: dict[str, object] = {"status": status}
    if not state.config.protect_metrics or state.authorized(token_from_request(request)):
        body.update(engine=state.engine.name, engine_info=state.engine.info(), sessions=state.sessions)
    return JSONResponse(body, status_code=code)


async def metrics(request: Request) -> Response:
    state: GatewayState = request.app.state.voxgate
    if state.config.protect_metrics and not state.authorized(token_from_request(request)):
        return _error(401, "a valid bearer token is required", "unauthorized", "authentication_error")
    return Response(state.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

"""HTTP endpoints: OpenAI-compatible speech, voices, health, metrics."""

from __future__ import annotations

import json
import struct
import time
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from voxgate.engine.base import SAMPLE_RATE

from .auth import token_from_request
from .context import synthesize_pcm
from .state import GatewayState


def _error(status: int, message: str, code: str, kind: str = "invalid_request_error") -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "code": code}}, status_code=status)


def wav_header_open_ended(sample_rate: int = SAMPLE_RATE) -> bytes:
    """A PCM16 mono WAV header whose RIFF and data sizes say 'unknown' (0xFFFFFFFF), for streaming."""
    byte_rate = sample_rate * 2
    return (b"RIFF" + struct.pack("<I", 0xFFFFFFFF) + b"WAVEfmt " + struct.pack("<IHHIIHH", 16, 1, 1, sample_rate,
            byte_rate, 2, 16) + b"data" + struct.pack("<I", 0xFFFFFFFF))


_FIELDS = {"model": (str,), "input": (str,), "voice": (str,), "response_format": (str,), "stream": (bool,),
           "speed": (int, float), "language": (str,), "instruct": (str,), "max_audio_ms": (int,)}


async def speech(request: Request) -> Response:
    state: GatewayState = request.app.state.voxgate
    metrics = state.metrics
    if not state.authorized(token_from_request(request)):
        metrics.http_requests.labels("401").inc()
        return _error(401, "a valid bearer token is required", "unauthorized", "authentication_error")
    if not state.engine.ready:
        metrics.http_requests.labels("503").inc()
        return _error(503, "the engine is warming up", "not_ready", "server_error")
    t_request = time.monotonic()
    try:
        body = json.loads(await request.body())
    except (json.JSONDecodeError, UnicodeDecodeError):
        return _error(400, "the body must be JSON", "invalid_json")
    if not isinstance(body, dict):
        return _error(400, "the body must be a JSON object", "invalid_json")
    for key, value in body.items():
        accepted = _FIELDS.get(key)
        if accepted is None:
            return _error(400, f"unknown field {key!r}", "unknown_field")
        if isinstance(value, bool) != (bool in accepted) or not isinstance(value, accepted):
            return _error(400, f"field {key!r} has the wrong type", "invalid_type")
    text = body.get("input")
    if not text or not text.strip():
        return _error(400, "'input' is required and must not be empty", "missing_input")
    if len(text) > state.config.limits.max_text_chars:
        metrics.http_requests.labels("413").inc()
        return _error(413, f"'input' is over {state.config.limits.max_text_chars} characters", "text_too_long")
    fmt = body.get("response_format", "pcm")
    if fmt not in ("pcm", "wav"):
        return _error(400, "response_format must be 'pcm' or 'wav'", "unsupported_format")
    if body.get("speed", 1.0) != 1.0:
        return _error(400, "only speed 1.0 is offered", "unsupported_speed")
    voice = body.get("voice") or state.engine.default_voice()
    known = {v.id for v in state.engine.voices()}
    if voice is None or (voice not in known and voice.lower() not in known):
        metrics.http_requests.labels("404").inc()
        missing = f"voice {voice!r} not found" if voice else "this engine has no voice to default to; name one"
        return _error(404, f"{missing}; see GET /v1/voices", "voice_not_found")
    limit_ms = int(state.config.limits.max_context_audio_s * 1000)
    budget_ms = min(limit_ms, body.get("max_audio_ms", limit_ms))
    if budget_ms <= 0:
        return _error(400, "max_audio_ms must be positive", "invalid_value")

    errors: list[str] = []

    async def audio() -> AsyncIterator[bytes]:
        if fmt == "wav":
            yield wav_header_open_ended()
        first = True
        async for data in synthesize_pcm(state.engine, text, voice, body.get("language"), body.get("instruct"),
                                         budget_ms * SAMPLE_RATE // 1000, errors):
            if first:
                metrics.first_audio.labels("http").observe(time.monotonic() - t_request)
                first = False
            metrics.bytes_out.labels("http").inc(len(data))
            metrics.audio_seconds.labels("http").inc(len(data) / 2 / SAMPLE_RATE)
            yield data

    media = "audio/wav" if fmt == "wav" else "audio/pcm"
    headers = {"X-Sample-Rate": str(SAMPLE_RATE), "X-Channels": "1", "Cache-Control": "no-store"}
    metrics.http_requests.labels("200").inc()
    if body.get("stream", True):
        return StreamingResponse(audio(), media_type=media, headers=headers)
    data = b"".join([piece async for piece in audio()])
    if errors and len(data) <= 44:
        return _error(500, "; ".join(errors), "synthesis_failed", "server_error")
    if fmt == "wav":  # a complete file: real sizes
        data = data[:4] + struct.pack("<I", len(data) - 8) + data[8:40] + struct.pack("<I", len(data) - 44) + data[44:]
    return Response(data, media_type=media, headers=headers)


async def voices(request: Request) -> JSONResponse:
    state: GatewayState = request.app.state.voxgate
    return JSONResponse({"voices": [v.to_json() for v in state.engine.voices()],
                         "default": state.engine.default_voice()})


async def health(request: Request) -> JSONResponse:
    state: GatewayState = request.app.state.voxgate
    ready = state.engine.ready
    return JSONResponse({"status": "ok" if ready else "starting", "engine": state.engine.name,
                         "engine_info": state.engine.info(), "sessions": state.sessions},
                        status_code=200 if ready else 503)


async def metrics(request: Request) -> Response:
    state: GatewayState = request.app.state.voxgate
    return Response(state.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

"""Uploaded voices over HTTP **(i16)**: `POST /v1/voices` (a recording, multipart or the raw body), `GET` and `DELETE
/v1/voices/{id}`. The store (voices/store.py) keeps them on disk and in the engine; docs/http-api.md has the errors."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from email.message import Message

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from voxgate.engine.base import EngineError
from voxgate.gateway.audio.upload_decode import UploadError, check_recording, decode_audio
from voxgate.gateway.session.state import GatewayState
from voxgate.gateway.transport.auth import token_from_request
from voxgate.gateway.voices.store import MODES, owner_of

from .errors import answered, api_error, read_body

log = logging.getLogger("voxgate.http")
MAX_NAME_CHARS = 100
FIELDS = ("file", "ref_text", "name", "mode")


def _header_params(name: str, value: str) -> Message:
    message = Message()
    message[name] = value
    return message


def parse_multipart(body: bytes, content_type: str) -> dict[str, bytes]:
    """multipart/form-data -> {field name: its bytes}, exactly as sent (the first part of each name)."""
    boundary = _header_params("content-type", content_type).get_param("boundary", header="content-type")
    if not isinstance(boundary, str) or not boundary:
        raise UploadError(400, "invalid_multipart", "multipart/form-data needs a boundary")
    fields: dict[str, bytes] = {}
    segments = (b"\r\n" + body).split(b"\r\n--" + boundary.encode("latin-1"))
    for segment in segments[1:]:  # [0]: the preamble
        if segment.startswith(b"--"):
            return fields  # the closing delimiter
        head, sep, content = segment.partition(b"\r\n\r\n")
        if not sep:
            break
        disposition = next((line.partition(b":")[2].decode("latin-1").strip() for line in head.split(b"\r\n")
                            if line.lower().startswith(b"content-disposition:")), "")
        name = _header_params("content-disposition", disposition).get_param("name", header="content-disposition")
        if isinstance(name, str):
            fields.setdefault(name, content)
    raise UploadError(400, "invalid_multipart", "the multipart body has no closing delimiter")


def _text(fields: dict[str, bytes], name: str) -> str | None:
    raw = fields.get(name)
    if raw is None:
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise UploadError(400, "invalid_value", f"{name} must be UTF-8 text", name) from None


def _fields(request: Request, body: bytes) -> dict[str, bytes]:
    """The upload's fields: multipart parts, or the raw body as `file` with the others from the query string."""
    content_type = request.headers.get("content-type", "")
    if content_type.partition(";")[0].strip().lower() == "multipart/form-data":
        fields = parse_multipart(body, content_type)
        unknown = sorted(set(fields) - set(FIELDS))
        if unknown:
            raise UploadError(400, "unknown_field", f"unknown field {unknown[0]!r}; fields: {', '.join(FIELDS)}",
                              unknown[0])
        return fields
    unknown = sorted(set(request.query_params) - set(FIELDS[1:]) - {"token"})
    if unknown:
        raise UploadError(400, "unknown_field", f"unknown parameter {unknown[0]!r}; with a raw body: "
                          f"{', '.join(FIELDS[1:])}", unknown[0])
    return {"file": body, **{k: v.encode("utf-8") for k, v in request.query_params.items() if k != "token"}}


async def create(request: Request) -> Response:
    state: GatewayState = request.app.state.voxgate
    return await answered(state, "POST /v1/voices", _create(request, state), _refusal,
                          counter=state.metrics.voice_uploads)


def _refusal(exc: Exception) -> Response | None:
    if isinstance(exc, UploadError):
        return api_error(exc.status, exc.message, exc.code, param=exc.param)
    if isinstance(exc, EngineError):
        return api_error(501 if exc.code == "unsupported" else 400, exc.message, exc.code,
                      param="ref_text" if exc.code == "ref_text_too_long" else None)
    return None


async def _create(request: Request, state: GatewayState) -> Response:
    token = token_from_request(request)
    if not state.authorized(token):
        return api_error(401, "a valid bearer token is required", "unauthorized", "authentication_error", close=True)
    store, config = state.voices, state.config
    if store is None:
        return api_error(501, "voice uploads are off on this server (config voices_dir)", "voice_uploads_disabled",
                      "server_error", close=True)
    if not state.engine.ready:  # (what the engine takes is known once it has loaded)
        return api_error(503, "the engine is warming up", "not_ready", "server_error", close=True)
    if not state.engine.supports_voice_upload:
        return api_error(501, f"the {state.engine.name} engine (this checkpoint) takes no uploaded voices; a Qwen3-TTS "
                      "Base checkpoint does", "unsupported", "server_error", close=True)
    if state.voice_uploads.locked():  # refused, not queued: a queued upload would hold its body meanwhile
        await _discarded(request, config.max_voice_upload_bytes, config.voice_upload_timeout_s)
        response = api_error(503, f"{config.max_concurrent_voice_uploads} uploads are being handled "
                          "(max_concurrent_voice_uploads); retry in a moment", "uploads_busy", "server_error",
                          close=True)
        response.headers["Retry-After"] = "1"
        return response
    async with state.voice_uploads:
        return await _upload(request, state, token)


async def _discarded(request: Request, limit: int, timeout: float) -> None:
    """Read the body and drop it, chunk by chunk (up to `limit` bytes, for `timeout` s at most): closing a
    connection with its body unread resets it, and a client still sending would lose the answer."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and (len(declared) > 18 or int(declared) > limit):
        return
    received = 0
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout):
            async for chunk in request.stream():
                received += len(chunk)
                if received > limit:
                    return


async def _upload(request: Request, state: GatewayState, token: str | None) -> Response:
    store, config = state.voices, state.config
    assert store is not None
    limit, timeout = config.max_voice_upload_bytes, config.voice_upload_timeout_s
    try:
        async with asyncio.timeout(timeout):  # a body trickled in would hold its upload slot for ever
            body = await read_body(request, limit)
    except TimeoutError:
        return api_error(408, f"the upload did not arrive within voice_upload_timeout_s ({timeout:g} s)",
                      "upload_timeout", close=True)
    if body is None:
        return api_error(413, f"the upload is over max_voice_upload_bytes ({limit})", "upload_too_large", close=True)
    fields = _fields(request, body)
    audio = fields.get("file")
    if not audio:
        raise UploadError(400, "invalid_audio", "no recording: send it as the `file` part or as the body", "file")
    ref_text, name = _text(fields, "ref_text"), _text(fields, "name")
    ref_text = ref_text.strip() if ref_text and ref_text.strip() else None
    mode = _text(fields, "mode") or ("in_context" if ref_text else "x_vector")
    if mode not in MODES:
        raise UploadError(400, "invalid_mode", f"mode must be x_vector or in_context, not {mode!r}", "mode")
    if mode == "in_context" and ref_text is None:
        raise UploadError(400, "missing_ref_text", "in_context cloning needs the recording's transcript (ref_text)",
                          "ref_text")
    if ref_text is not None and len(ref_text) > config.limits.max_text_chars:
        raise UploadError(400, "invalid_value", f"ref_text is over {config.limits.max_text_chars} characters",
                          "ref_text")
    if name is not None and not 0 < len(name) <= MAX_NAME_CHARS:
        raise UploadError(400, "invalid_value", f"name must be 1 to {MAX_NAME_CHARS} characters", "name")
    owner = owner_of(token, bool(config.auth_tokens))
    store.check_room(owner)
    recording = await asyncio.to_thread(decode_audio, audio, config.max_voice_s)  # off the loop: /health answers
    check_recording(recording, config.min_voice_s, config.max_voice_s)
    record = await store.add(recording, name, mode, ref_text, owner)
    log.info("voice %s uploaded (%s, %.1f s)", record.id, mode, record.duration_s)
    return JSONResponse(record.to_json(), status_code=201)


async def one(request: Request) -> Response:
    """GET: the voice's record; DELETE: remove it (files, engine, listing). 404 for voices of other tokens."""
    state: GatewayState = request.app.state.voxgate
    token = token_from_request(request)
    if not state.authorized(token):
        return api_error(401, "a valid bearer token is required", "unauthorized", "authentication_error")
    voice_id = request.path_params["voice_id"]
    owner = owner_of(token, bool(state.config.auth_tokens))
    record = state.voices.get(voice_id, owner) if state.voices is not None else None
    if record is None:
        return api_error(404, f"voice {voice_id!r} not found", "voice_not_found", param="voice_id")
    if request.method == "DELETE":
        assert state.voices is not None
        state.voices.remove(voice_id)
        log.info("voice %s deleted", voice_id)
        return JSONResponse({"id": voice_id, "object": "voice", "deleted": True})
    return JSONResponse(record.to_json())

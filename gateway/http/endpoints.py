"""HTTP endpoints: OpenAI-compatible speech (the audio itself is in speech.py), voices, models, health, metrics."""

from __future__ import annotations

import time

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from voxgate.gateway.session.load import LOAD_HEADER, backend_load, load_fraction
from voxgate.gateway.session.state import GatewayState
from voxgate.gateway.transport.auth import token_from_request
from voxgate.gateway.voices.model_names import model_ids
from voxgate.gateway.voices.openai_names import voice_aliases

from .errors import answered, api_error, read_body
from .speech import speak
from .speech_request import SpeechError, check, decode_body

STARTED_AT = int(time.time())  # `created` of every /v1/models entry


async def speech(request: Request) -> Response:
    state: GatewayState = request.app.state.voxgate
    return await answered(state, "POST /v1/audio/speech", _speech(request, state),
                          counter=state.metrics.http_requests)


async def _speech(request: Request, state: GatewayState) -> Response:
    if not state.authorized(token_from_request(request)):
        return api_error(401, "a valid bearer token is required", "unauthorized", "authentication_error")
    if state.drain.draining:
        return api_error(503, "the server is shutting down", "shutting_down", "server_error", close=True)
    if not state.engine.ready:
        return api_error(503, "the engine is warming up", "not_ready", "server_error")
    media_type = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media_type != "application/json":  # also a CSRF guard: cross-site pages cannot send JSON without a preflight
        return api_error(415, "the body must be JSON with Content-Type: application/json", "unsupported_media_type")
    t_request = time.monotonic()
    limit = state.config.max_request_bytes
    raw = await read_body(request, limit)
    if raw is None:
        return api_error(413, f"the body is over max_request_bytes ({limit})", "request_too_large", close=True)
    try:
        job = check(decode_body(raw), state, state.uploaded_ids(token_from_request(request)))
    except SpeechError as exc:
        return api_error(exc.status, exc.message, exc.code, param=exc.param)
    refused = state.admission.check("http")  # after the body: nothing awaited between the decision and admit()
    if refused is not None:
        return api_error(503, "the engine is full; retry later or elsewhere", "engine_full", "server_error",
                         retry_after=refused.retry_after_header)
    return await speak(state, job, t_request, state.admission.admit())


async def voices(request: Request) -> JSONResponse:
    state: GatewayState = request.app.state.voxgate
    return JSONResponse({"voices": [v.to_json() for v in state.engine.voices()] + _uploaded(request, state),
                         "default": state.engine.default_voice(),
                         "aliases": voice_aliases(state.engine, state.config.voice_aliases)})


def _uploaded(request: Request, state: GatewayState) -> list[dict[str, object]]:
    """The uploaded voices the caller may see (theirs with auth on; none without a valid token) **(i16)**."""
    token = token_from_request(request)
    if state.voices is None or not state.authorized(token):
        return []
    ids = set(state.uploaded_ids(token))
    return [{**r.info().to_json(), **r.to_json(), "uploaded": True} for r in state.voices.records.values()
            if r.id in ids]


async def audio_voices(request: Request) -> JSONResponse:
    """vLLM-Omni's `GET /v1/audio/voices`: voice names (engine ids, then OpenAI aliases), and the uploaded voices."""
    state: GatewayState = request.app.state.voxgate
    names = [v.id for v in state.engine.voices()] + list(voice_aliases(state.engine, state.config.voice_aliases))
    uploaded = [{"id": v["id"], "name": v["name"], "mode": v["mode"], "created_at": v["created_at"]}
                for v in _uploaded(request, state)]
    return JSONResponse({"voices": list(dict.fromkeys(names)), "uploaded_voices": uploaded})


async def models(request: Request) -> JSONResponse:
    """OpenAI's `GET /v1/models`: every id `model` may name (all served by the one engine)."""
    state: GatewayState = request.app.state.voxgate
    ids = model_ids(state.engine, state.engine.info(), state.config.served_model_name, state.config.model_aliases)
    return JSONResponse({"object": "list", "data": [{"id": i, "object": "model", "created": STARTED_AT,
                                                     "owned_by": "voxgate"} for i in ids]})


def _health_status(state: GatewayState) -> tuple[str, int]:
    """200 once the engine is warm; 503 while it warms up and from the first moment of a shutdown (draining)."""
    if state.drain.draining:
        return "draining", 503
    return ("ok", 200) if state.engine.ready else ("starting", 503)


async def health(request: Request) -> JSONResponse:
    state: GatewayState = request.app.state.voxgate
    status, code = _health_status(state)
    body: dict[str, object] = {"status": status}
    headers = None
    if not state.config.protect_metrics or state.authorized(token_from_request(request)):
        body.update(engine=state.engine.name, engine_info=state.engine.info(), sessions=state.sessions)
        headers = {LOAD_HEADER: f"{load_fraction(state):.4f}"}
    return JSONResponse(body, status_code=code, headers=headers)


async def health_load(request: Request) -> JSONResponse:
    """The balancer's view: /health's status code, and how busy this backend is (session/load.py, docs/deploy.md)."""
    state: GatewayState = request.app.state.voxgate
    status, code = _health_status(state)
    body: dict[str, object] = {"status": status}
    headers = None
    if not state.config.protect_metrics or state.authorized(token_from_request(request)):
        body.update(backend_load(state))
        headers = {LOAD_HEADER: f"{body['load']:.4f}"}
    return JSONResponse(body, status_code=code, headers=headers)


async def metrics(request: Request) -> Response:
    state: GatewayState = request.app.state.voxgate
    if state.config.protect_metrics and not state.authorized(token_from_request(request)):
        return api_error(401, "a valid bearer token is required", "unauthorized", "authentication_error")
    return Response(state.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

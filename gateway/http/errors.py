"""What every HTTP route answers with when it does not answer with audio: OpenAI-shaped errors, the status of an
engine's refusal, a body read under a limit, and the count of each route's answers by status."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from prometheus_client import Counter
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from voxgate.gateway.session.state import GatewayState

log = logging.getLogger("voxgate.http")

# Engine error codes (EngineError.code) -> HTTP status, for a request refused before any audio.
ENGINE_ERROR_STATUS = {"voice_not_found": 404, "language_not_supported": 400, "bad_request": 400,
                       "text_too_long": 413, "not_ready": 503, "unsupported": 400}


def api_error(status: int, message: str, code: str, kind: str = "invalid_request_error",
              close: bool = False, param: str | None = None, retry_after: str | None = None) -> JSONResponse:
    """An OpenAI-shaped error. `close`: the connection is not kept (an unread body, a shutdown); `retry_after`:
    a Retry-After header (seconds)."""
    headers = {"Connection": "close"} if close else {}
    if retry_after is not None:
        headers["Retry-After"] = retry_after
    return JSONResponse({"error": {"message": message, "type": kind, "code": code, "param": param}},
                        status_code=status, headers=headers or None)


async def read_body(request: Request, limit: int) -> bytes | None:
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


async def answered(state: GatewayState, what: str, handling: Awaitable[Response],
                   refusal: Callable[[Exception], Response | None] = lambda _exc: None, *,
                   counter: Counter) -> Response:
    """A handler's response, counted by status in its route's `counter`: `refusal` turns the handler's own
    exceptions into answers, a client that left is a 400, anything else one logged 500."""
    try:
        response = await handling
    except ClientDisconnect:
        response = api_error(400, "the client closed the request", "client_disconnected")
    except Exception as exc:
        refused = refusal(exc)
        if refused is None:
            log.exception("%s failed", what)
            state.metrics.errors.labels("internal_error").inc()
            refused = api_error(500, "internal error", "internal_error", "server_error")
        response = refused
    counter.labels(str(response.status_code)).inc()
    return response

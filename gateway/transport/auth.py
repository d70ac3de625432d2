"""Token extraction. Tokens come from `Authorization: Bearer`, a `voxgate.token.<t>` subprotocol, or `?token=`."""

from __future__ import annotations

from starlette.requests import HTTPConnection
from voxgate.gateway.protocol import TOKEN_SUBPROTOCOL_PREFIX


def token_from_websocket(conn: HTTPConnection) -> str | None:
    for proto in conn.scope.get("subprotocols") or []:
        if proto.startswith(TOKEN_SUBPROTOCOL_PREFIX):
            return proto[len(TOKEN_SUBPROTOCOL_PREFIX):]
    return token_from_request(conn)


def token_from_request(conn: HTTPConnection) -> str | None:
    header = conn.headers.get("authorization", "")
    if header.lower().startswith("bearer "):
        return header[7:].strip()
    return conn.query_params.get("token")

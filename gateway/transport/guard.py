"""Who may talk to the gateway from a browser: a Host allow-list (DNS rebinding) and an Origin allow-list
(cross-site WebSocket hijacking, cross-site POSTs), as ASGI middleware in front of every route.

Host: IP literals and `localhost` (and `*.localhost`) always pass, names only if `allowed_hosts` lists them (or
`["*"]`): a rebinding attack needs a name the attacker controls. Origin (WebSockets and POSTs; clients that are
not browsers send none and pass): the page's own origin (its host:port equals the Host header), localhost
origins, and those in `allowed_origins` (or `["*"]`); `Origin: null` (sandboxed frames, file://) is refused unless
listed.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send
from voxgate.gateway.config import GatewayConfig
from voxgate.gateway.metrics import GatewayMetrics


def _hostname(host: str) -> str:
    """`Example.com:8000` -> `example.com`, `[::1]:8000` -> `::1`."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _is_local_or_ip(name: str) -> bool:
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _is_loopback(name: str) -> bool:
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


class BrowserGuard:
    def __init__(self, app: ASGIApp, config: GatewayConfig, metrics: GatewayMetrics) -> None:
        self.app = app
        self.any_host = "*" in config.allowed_hosts
        self.hosts = {h.lower().rstrip(".") for h in config.allowed_hosts}
        self.any_origin = "*" in config.allowed_origins
        self.origins = {o.lower().rstrip("/") for o in config.allowed_origins}
        self.metrics = metrics

    def host_allowed(self, host: str | None) -> bool:
        if host is None or self.any_host:  # HTTP/1.0 without Host is no browser
            return True
        name = _hostname(host).rstrip(".")
        return _is_local_or_ip(name) or name in self.hosts or any(
            h.startswith("*.") and name.endswith(h[1:]) for h in self.hosts)

    def origin_allowed(self, origin: str, host: str | None) -> bool:
        origin = origin.strip().lower()
        if self.any_origin or origin in self.origins:
            return True
        if origin == "null":
            return False
        parts = urlsplit(origin)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return False
        if host is not None and parts.netloc == host.strip().lower():
            return True  # the page's own origin
        return _is_loopback(parts.hostname)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])  # later duplicates win; browsers send each of these once
        host = _text(headers.get(b"host"))
        origin = _text(headers.get(b"origin"))
        if not self.host_allowed(host):
            await self._refuse(scope, receive, send, 421, "host_not_allowed",
                               "this Host is not served here (see allowed_hosts)")
            return
        checks_origin = scope["type"] == "websocket" or scope.get("method") not in ("GET", "HEAD", "OPTIONS")
        if checks_origin and origin is not None and not self.origin_allowed(origin, host):
            await self._refuse(scope, receive, send, 403, "origin_not_allowed",
                               "this page's origin may not use the gateway (see allowed_origins)")
            return
        await self.app(scope, receive, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, status: int, code: str, message: str) -> None:
        self.metrics.errors.labels(code).inc()
        response = JSONResponse({"error": {"message": message, "type": "invalid_request_error", "code": code}},
                                status_code=status, headers={"Connection": "close"})
        if scope["type"] == "websocket" and "websocket.http.response" not in scope.get("extensions", {}):
            await send({"type": "websocket.close", "code": 1008, "reason": code})  # the server answers 403
            return
        await response(scope, receive, send)


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode("latin-1")

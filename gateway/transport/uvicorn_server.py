"""uvicorn wiring: TCP_NODELAY asserted on every accepted socket, closed connections freed without the collector
(transport_cycle.py), and a server runnable in a background thread."""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from typing import Any

import uvicorn
from starlette.applications import Starlette
from uvicorn.protocols.http.auto import AutoHTTPProtocol

from . import log_filters
from .shutdown import DrainingServer
from .transport_cycle import release_transport
from .ws_protocol import VoxgateWebSocketProtocol

log = logging.getLogger("voxgate.server")


def ensure_nodelay(transport: asyncio.BaseTransport) -> None:
    """Audio frames are small and latency-bound: Nagle's algorithm must be off. asyncio usually sets it; we check."""
    sock = transport.get_extra_info("socket")
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if not sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY):
        raise RuntimeError("TCP_NODELAY could not be set on an accepted socket")


class NoDelayHTTPProtocol(AutoHTTPProtocol):  # type: ignore[misc, valid-type]
    """The HTTP protocol (WebSocket upgrades start here too) with TCP_NODELAY asserted on connect."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:  # type: ignore[override]
        ensure_nodelay(transport)
        self._voxgate_transport = transport
        super().connection_made(transport)  # type: ignore[arg-type]

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        release_transport(self._voxgate_transport)


def uvicorn_config(app: Starlette, host: str, port: int, **kwargs: Any) -> uvicorn.Config:
    config = app.state.voxgate.config
    uv_config = uvicorn.Config(app, host=host, port=port, http=NoDelayHTTPProtocol, ws=VoxgateWebSocketProtocol,
                               ws_max_size=4 * config.limits.max_message_bytes, ws_ping_interval=20.0,
                               ws_ping_timeout=20.0, ws_per_message_deflate=config.ws_deflate, lifespan="on",
                               timeout_graceful_shutdown=1.0, **kwargs)
    log_filters.install()  # after uvicorn.Config, which (re)configures its loggers
    return uv_config


def draining_server(app: Starlette, config: uvicorn.Config) -> DrainingServer:
    """The uvicorn server that drains the app on SIGTERM and always ends (shutdown.py)."""
    return DrainingServer(config, app.state.voxgate.drain)


class BackgroundServer:
    """A real uvicorn server on 127.0.0.1 and a free port, in a thread (tests and tools)."""

    def __init__(self, app: Starlette, host: str = "127.0.0.1", port: int = 0) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, port))
        self.host, self.port = self.sock.getsockname()[:2]
        self.server = draining_server(app, uvicorn_config(app, self.host, self.port, log_level="warning"))
        self.thread = threading.Thread(target=self._run, name="uvicorn", daemon=True)

    @property
    def http_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://{self.host}:{self.port}/v1/tts/ws"

    def _run(self) -> None:
        self.server.run(sockets=[self.sock])

    def __enter__(self) -> BackgroundServer:
        self.thread.start()
        while not self.server.started:
            if not self.thread.is_alive():
                raise RuntimeError("the server failed to start")
            threading.Event().wait(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()

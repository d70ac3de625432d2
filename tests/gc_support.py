"""What only Python's garbage collector could free, of what a server made: the check behind "no reference cycle on
the request path" (tests/reliability/test_gc_cycles.py, tests/qwen3tts/test_gc_cycles.py). The clients there are
synchronous (sockets and threads, no asyncio), so every asyncio object in the garbage is the server's."""

from __future__ import annotations

import collections
import gc
import json
import time
from collections.abc import Callable
from typing import Any

from voxgate.gateway.transport.uvicorn_server import BackgroundServer
from websockets.sync.client import ClientConnection

SERVER_SIDE = ("voxgate.", "uvicorn.", "starlette.", "websockets.server", "asyncio.", "_asyncio")


def _name(obj: object) -> str:
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def server_garbage(action: Callable[[], None], settled: Callable[[], bool]) -> collections.Counter[str]:
    """The server's objects that only the collector could free, of those made while `action` ran."""
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what a pass finds unreachable goes to gc.garbage instead of being freed
    try:
        action()
        deadline = time.monotonic() + 10
        while not settled():  # the server ends sessions and connections on its own thread
            assert time.monotonic() < deadline, "the server did not close every connection"
            time.sleep(0.02)
        gc.collect()
        return collections.Counter(_name(o) for o in gc.garbage if _name(o).startswith(SERVER_SIDE))
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


def connections_closed(server: BackgroundServer) -> Callable[[], bool]:
    state = server.server.config.app.state.voxgate
    return lambda: state.sessions == 0 and not server.server.server_state.connections




def wait_json(ws: ClientConnection, want: str, timeout: float = 10) -> dict[str, Any]:
    """The next JSON message of type `want` (or an error), other messages and audio skipped."""
    while True:
        raw = ws.recv(timeout=timeout)
        if isinstance(raw, str) and json.loads(raw)["type"] in (want, "error"):
            return json.loads(raw)

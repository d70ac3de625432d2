"""uvicorn's WebSocket protocol with a close that never waits for a peer that stopped reading.

uvicorn writes a close frame only once the transport is writable again, and closes the transport gracefully
(flushing what is buffered): a peer that never reads keeps both waiting forever, and the socket with them. This
protocol offers the app the ASGI extension `voxgate.force_close(text, code, reason, grace_s)`: it writes an
optional last text frame and the close frame into the transport at once (behind whatever is unsent), and resets
the connection if the peer has not closed within `grace_s`.

It also offers `voxgate.send_now(data) -> bool`: a message written at once, without the three coroutine layers
of the ASGI send, when the transport takes it without waiting (False: the caller uses the ASGI send, which waits).
"""

from __future__ import annotations

import socket
import struct
import weakref
from collections.abc import Callable
from typing import Any

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.exceptions import InvalidState

from .transport_cycle import release_transport

FORCE_CLOSE = "voxgate.force_close"
SEND_NOW = "voxgate.send_now"


class VoxgateWebSocketProtocol(WebSocketsSansIOProtocol):
    def handle_connect(self, event: Any) -> None:
        super().handle_connect(event)
        scope = getattr(self, "scope", None)
        if scope is not None:
            # Weakly bound: the scope is the protocol's own, so strong bound methods would make a cycle that keeps
            # every closed connection for the garbage collector.
            scope["extensions"][FORCE_CLOSE] = _weakly(self.force_close, None)
            scope["extensions"][SEND_NOW] = _weakly(self.send_now, False)

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        release_transport(getattr(self, "transport", None))

    def send_now(self, data: bytes | str) -> bool:
        if not (self.handshake_complete and self.writable.is_set()) or self.close_sent or self.disconnected \
                or self.initial_response is not None:
            return False
        try:
            if isinstance(data, str):
                self.conn.send_text(data.encode())
            else:
                self.conn.send_binary(data)
        except InvalidState:
            return False
        self.transport.write(b"".join(self.conn.data_to_send()))
        return True

    def force_close(self, text: str | None, code: int, reason: str, grace_s: float) -> None:
        if self.disconnected:
            return
        if not self.close_sent:
            try:
                if text is not None:
                    self.conn.send_text(text.encode())
                self.conn.send_close(code, reason)
            except InvalidState:
                pass
            self.transport.write(b"".join(self.conn.data_to_send()))
            self.close_sent = True
            self.queue.put_nowait({"type": "websocket.disconnect", "code": code, "reason": reason})
        self.loop.call_later(grace_s, self._abort_unless_closed)

    def _abort_unless_closed(self) -> None:
        if self.disconnected:
            return
        # A reset, not a close: a closed socket with unsent data lingers in the kernel, probing a zero window.
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.transport.abort()


def _weakly(method: Callable[..., Any], gone: Any) -> Callable[..., Any]:
    """`method` without a strong reference to its object; `gone` once the object is freed."""
    ref = weakref.WeakMethod(method)

    def call(*args: Any) -> Any:
        bound = ref()
        return gone if bound is None else bound(*args)
    return call

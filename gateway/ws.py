"""The WebSocket endpoint `/v1/tts/ws`: accept, authorize, read messages into the Session, close on fatal errors."""

from __future__ import annotations

import asyncio
import logging
import time

from starlette.websockets import WebSocket, WebSocketDisconnect

from .auth import token_from_websocket
from .protocol import (
    PROTOCOL,
    WS_1000_NORMAL_CLOSURE,
    WS_1001_GOING_AWAY,
    WS_1008_POLICY_VIOLATION,
    WS_1011_INTERNAL_ERROR,
    WS_4001_UNAUTHORIZED,
    WS_4008_TIMEOUT,
    WS_4029_TOO_MANY_SESSIONS,
    WS_4400_PROTOCOL_VIOLATION,
    ProtocolError,
    parse_message,
)
from .session import Session
from .state import GatewayState
from .writer import SocketWriter

log = logging.getLogger("voxgate.ws")
MAX_URGENT_BACKLOG = 1024  # control messages waiting for a client that stopped reading


class RateLimiter:
    """Token bucket: `rate` messages a second, bursts of twice that."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.capacity = 2 * rate
        self.tokens = self.capacity
        self.at = time.monotonic()

    def take(self) -> bool:
        now = time.monotonic()
        self.tokens = min(self.capacity, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True


async def tts_websocket(websocket: WebSocket) -> None:
    state: GatewayState = websocket.app.state.voxgate
    offered = websocket.scope.get("subprotocols") or []
    await websocket.accept(subprotocol=PROTOCOL if PROTOCOL in offered else None)
    if not state.authorized(token_from_websocket(websocket)):
        await _refuse(websocket, ProtocolError("unauthorized", "a valid token is required",
                                               close_code=WS_4001_UNAUTHORIZED), state)
        return
    if state.drain.draining:
        await _refuse(websocket, ProtocolError("shutting_down", "the server is shutting down",
                                               close_code=WS_1001_GOING_AWAY), state)
        return
    if state.sessions >= state.config.max_sessions:
        await _refuse(websocket, ProtocolError("too_many_sessions", "the server is at its session limit; retry later",
                                               close_code=WS_4029_TOO_MANY_SESSIONS), state)
        return
    session: Session | None = None

    def on_frame_written(frame, written_at):
        session.on_frame_written(frame, written_at)

    writer = SocketWriter(websocket.send_bytes, websocket.send_text, state.config.writer_queue_frames,
                          on_frame_written)
    session = Session(state.engine, state.config, state.metrics, writer)
    loop = asyncio.get_running_loop()
    writer_task = loop.create_task(writer.run())
    reader = loop.create_task(_read_loop(websocket, session, writer, writer_task))
    going_away = False

    def end_for_shutdown() -> None:  # drain.py: the session's contexts are over (or the grace is)
        nonlocal going_away
        going_away = True
        reader.cancel()

    state.session_opened()
    state.drain.add_session(session, end_for_shutdown)
    close_code, reason = WS_1000_NORMAL_CLOSURE, ""
    try:
        try:
            await reader
        except asyncio.CancelledError:
            if not going_away or asyncio.current_task().cancelling():
                raise
            close_code, reason = WS_1001_GOING_AWAY, "shutting_down"
    except ProtocolError as exc:
        close_code, reason = exc.close_code or WS_4400_PROTOCOL_VIOLATION, exc.code
        state.metrics.errors.labels(exc.code).inc()
        writer.put_urgent(exc.to_json())
    except WebSocketDisconnect:
        close_code = -1
    except Exception:
        log.exception("session %s failed", session.session_id)
        close_code, reason = WS_1011_INTERNAL_ERROR, "internal_error"
        state.metrics.errors.labels("internal_error").inc()
        writer.put_urgent(ProtocolError("internal_error", "internal error; the session is closed",
                                        close_code=WS_1011_INTERNAL_ERROR).to_json())
    finally:
        reader.cancel()
        state.drain.remove_session(session)
        await session.close()
        if close_code not in (-1, WS_1001_GOING_AWAY) and not writer_task.done():
            await _drain_urgent(writer)  # (going away: the drain already waited for the final message)
        writer.close()
        writer_task.cancel()
        await asyncio.gather(writer_task, return_exceptions=True)
        state.session_closed()
        if close_code != -1:
            try:
                await websocket.close(code=close_code, reason=reason)
            except (RuntimeError, OSError, WebSocketDisconnect):
                pass  # the client left first


async def _drain_urgent(writer: SocketWriter, timeout: float = 1.0) -> None:
    # Let the writer send a final error (and anything urgent before it) before the close frame.
    deadline = time.monotonic() + timeout
    while writer.urgent_backlog and time.monotonic() < deadline:
        await asyncio.sleep(0.001)


async def _refuse(websocket: WebSocket, error: ProtocolError, state: GatewayState) -> None:
    import json

    state.metrics.errors.labels(error.code).inc()
    await websocket.send_text(json.dumps(error.to_json()))
    await websocket.close(code=error.close_code or WS_4400_PROTOCOL_VIOLATION, reason=error.code)


async def _read_loop(websocket: WebSocket, session: Session, writer: SocketWriter, writer_task: asyncio.Task) -> None:
    limits = session.limits
    rate = RateLimiter(limits.max_messages_per_s)
    opened = time.monotonic()
    while True:
        left = limits.max_session_s - (time.monotonic() - opened)
        if left <= 0:
            raise ProtocolError("session_expired", f"sessions last at most {limits.max_session_s:g} s",
                                close_code=WS_4008_TIMEOUT)
        try:
            async with asyncio.timeout(min(limits.idle_timeout_s, left)):
                message = await websocket.receive()
        except TimeoutError:
            if session.active_contexts or time.monotonic() - opened >= limits.max_session_s:
                continue
            raise ProtocolError("idle_timeout", f"no message for {limits.idle_timeout_s:g} s",
                                close_code=WS_4008_TIMEOUT) from None
        if writer_task.done():
            writer_task.result()  # the socket broke while writing: surface it
        if writer.urgent_backlog > MAX_URGENT_BACKLOG:
            raise ProtocolError("slow_consumer", "the client does not read its messages; closing",
                                close_code=WS_1008_POLICY_VIOLATION)
        if message["type"] == "websocket.disconnect":
            raise WebSocketDisconnect(message.get("code", 1000))
        if message.get("bytes") is not None:
            raise ProtocolError("protocol_violation", "binary frames are server-to-client only",
                                close_code=WS_4400_PROTOCOL_VIOLATION)
        text = message.get("text") or ""
        try:
            if len(text) > limits.max_message_bytes or len(text.encode("utf-8")) > limits.max_message_bytes:
                raise ProtocolError("message_too_large",
                                    f"message over limits.max_message_bytes ({limits.max_message_bytes})")
            if not rate.take():
                raise ProtocolError("rate_limited", f"over {limits.max_messages_per_s:g} messages a second; dropped")
            session.handle(parse_message(text))
        except ProtocolError as exc:
            if exc.fatal:
                raise
            session.metrics.errors.labels(exc.code).inc()
            writer.put_urgent(exc.to_json())

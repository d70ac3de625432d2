"""The WebSocket endpoint `/v1/tts/ws`: accept, authorize, read messages into the Session, close on fatal errors.

A client that stops reading is let go by a timer (`Watchdog`), not by a message it would have to send: when the
socket has not taken a message for `limits.slow_consumer_s`, the session ends with `slow_consumer`. Closing never
waits for such a peer: the error and the close frame go into the transport behind the unsent audio, and the
transport is aborted after `CLOSE_GRACE_S` (transport/ws_protocol.py), so its socket and its `max_sessions` slot
are freed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable

from starlette.websockets import WebSocket, WebSocketDisconnect
from voxgate.gateway.protocol import (
    PROTOCOL,
    WS_1000_NORMAL_CLOSURE,
    WS_1001_GOING_AWAY,
    WS_1008_POLICY_VIOLATION,
    WS_1011_INTERNAL_ERROR,
    WS_1013_TRY_AGAIN_LATER,
    WS_4001_UNAUTHORIZED,
    WS_4008_TIMEOUT,
    WS_4029_TOO_MANY_SESSIONS,
    WS_4400_PROTOCOL_VIOLATION,
    ProtocolError,
    parse_message,
)
from voxgate.gateway.transport.auth import token_from_websocket
from voxgate.gateway.transport.writer import SocketWriter
from voxgate.gateway.transport.ws_protocol import FORCE_CLOSE, SEND_NOW

from .session import Session
from .state import GatewayState

log = logging.getLogger("voxgate.ws")
MAX_URGENT_BACKLOG = 1024  # control messages waiting for a client that stopped reading
CLOSE_GRACE_S = 1.0  # a closing peer gets this long to take the close frame; then the transport is aborted
STALLED_S = 0.25  # a socket that has not taken a message for this long is not waited for at close


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
    if not state.engine.ready:  # the engine loads behind a listening socket (serve): come back when /health is 200
        await _refuse(websocket, ProtocolError("not_ready", "the engine is still loading; retry shortly",
                                               close_code=WS_1013_TRY_AGAIN_LATER), state)
        return
    refused = state.admission.check("ws_session")
    if refused is not None:
        await _refuse(websocket, ProtocolError("engine_full", "the engine is full; retry later or elsewhere",
                                               close_code=WS_1013_TRY_AGAIN_LATER,
                                               retry_after_ms=refused.retry_after_ms), state)
        return
    session: Session | None = None

    def on_frame_written(frame, written_at):
        session.on_frame_written(frame, written_at)

    writer = SocketWriter(websocket.send_bytes, websocket.send_text, state.config.writer_queue_frames,
                          on_frame_written, websocket.scope.get("extensions", {}).get(SEND_NOW))
    token = token_from_websocket(websocket)
    session = Session(state.engine, state.config, state.metrics, writer, state.turns,
                      lambda: state.uploaded_ids(token), state.admission, state.loop_lags)
    writer_task = asyncio.get_running_loop().create_task(writer.run())
    state.session_opened()
    reader = Reader(websocket, session, writer, writer_task)
    watchdog = Watchdog(writer, session.limits.slow_consumer_s, reader.fail)
    # transport/drain.py calls this once the session's contexts are over (or the grace is): `shutting_down`, close 1001.
    state.drain.add_session(session, lambda: reader.fail(ProtocolError(
        "shutting_down", "the server is shutting down", close_code=WS_1001_GOING_AWAY)))
    close_code, reason, fatal = WS_1000_NORMAL_CLOSURE, "", None
    try:
        await reader.run()
    except ProtocolError as exc:
        close_code, reason, fatal = exc.close_code or WS_4400_PROTOCOL_VIOLATION, exc.code, exc.to_json()
        state.metrics.errors.labels(exc.code).inc()
    except WebSocketDisconnect:
        close_code = -1
    except Exception:
        log.exception("session %s failed", session.session_id)
        close_code, reason = WS_1011_INTERNAL_ERROR, "internal_error"
        state.metrics.errors.labels("internal_error").inc()
        fatal = ProtocolError("internal_error", "internal error; the session is closed",
                              close_code=WS_1011_INTERNAL_ERROR).to_json()
    finally:
        watchdog.stop()
        state.drain.remove_session(session)
        await session.close()
        stalled = writer.stalled_for(time.monotonic()) >= STALLED_S
        if fatal is not None and not stalled and not writer_task.done():
            writer.put_urgent(fatal)
            fatal = None if await _drain_urgent(writer) else fatal
        writer.close()
        writer_task.cancel()
        await asyncio.gather(writer_task, return_exceptions=True)
        if close_code != -1:
            await _close(websocket, close_code, reason, fatal, stalled)
        state.session_closed()
        session = None  # on_frame_written's cell -> session -> writer -> on_frame_written: freed without the collector


class Watchdog:
    """A timer per session: ends it with `slow_consumer` when the socket stops taking messages for `limit_s`
    (a client that stopped reading), or when too many control messages wait for it."""

    def __init__(self, writer: SocketWriter, limit_s: float, fail: Callable[[ProtocolError], None]) -> None:
        self.writer = writer
        self.limit_s = limit_s
        self.fail = fail
        self.interval_s = min(1.0, limit_s / 4)
        self._timer = asyncio.get_running_loop().call_later(self.interval_s, self._check)

    def _check(self) -> None:
        if self.writer.stalled_for(time.monotonic()) >= self.limit_s or \
                self.writer.urgent_backlog > MAX_URGENT_BACKLOG:
            self.fail(ProtocolError("slow_consumer", "the client does not read its messages; closing",
                                    close_code=WS_1008_POLICY_VIOLATION))
            return
        self._timer = asyncio.get_running_loop().call_later(self.interval_s, self._check)

    def stop(self) -> None:
        self._timer.cancel()


async def _close(websocket: WebSocket, code: int, reason: str, unsent: dict | None, stalled: bool) -> None:
    """Close without ever waiting on a peer that does not read: a graceful close if the socket takes it within
    the grace, else the error (if still unsent) and the close frame written behind the backlog, then an abort."""
    force = websocket.scope.get("extensions", {}).get(FORCE_CLOSE)
    if not stalled or force is None:
        try:
            async with asyncio.timeout(CLOSE_GRACE_S):  # not wait_for: on 3.11 its task and frame make a cycle
                await websocket.close(code=code, reason=reason)
            return
        except TimeoutError:
            pass
        except (RuntimeError, OSError, WebSocketDisconnect):
            return  # the client left first
    if force is not None:
        force(json.dumps(unsent, separators=(",", ":")) if unsent is not None else None, code, reason, CLOSE_GRACE_S)


async def _drain_urgent(writer: SocketWriter, timeout: float = CLOSE_GRACE_S) -> bool:
    """Let the writer send a final error (and anything urgent before it) before the close frame; True if it did."""
    deadline = time.monotonic() + timeout
    while (writer.urgent_backlog or writer.stalled_for(time.monotonic())) and time.monotonic() < deadline:
        await asyncio.sleep(0.001)
    return not writer.urgent_backlog and not writer.stalled_for(time.monotonic())


async def _refuse(websocket: WebSocket, error: ProtocolError, state: GatewayState) -> None:
    state.metrics.errors.labels(error.code).inc()
    await websocket.send_text(json.dumps(error.to_json()))
    await websocket.close(code=error.close_code or WS_4400_PROTOCOL_VIOLATION, reason=error.code)


class Reader:
    """Reads messages into the session until the client leaves or a fatal error. `fail()` ends it from outside
    (the watchdog) without waiting for a message: it fires the read's timeout at once."""

    def __init__(self, websocket: WebSocket, session: Session, writer: SocketWriter, writer_task: asyncio.Task) -> None:
        self.websocket = websocket
        self.session = session
        self.writer = writer
        self.writer_task = writer_task
        self.failure: ProtocolError | None = None
        self._timeout: asyncio.Timeout | None = None

    def fail(self, error: ProtocolError) -> None:
        self.failure = error
        if self._timeout is not None:
            self._timeout.reschedule(asyncio.get_running_loop().time())

    async def run(self) -> None:
        websocket, session, writer = self.websocket, self.session, self.writer
        limits = session.limits
        rate = RateLimiter(limits.max_messages_per_s)
        opened = time.monotonic()
        while True:
            if self.failure is not None:
                raise self.failure
            left = limits.max_session_s - (time.monotonic() - opened)
            if left <= 0:
                raise ProtocolError("session_expired", f"sessions last at most {limits.max_session_s:g} s",
                                    close_code=WS_4008_TIMEOUT)
            try:
                async with asyncio.timeout(min(limits.idle_timeout_s, left)) as self._timeout:
                    message = await websocket.receive()
            except TimeoutError:
                if self.failure is not None:
                    raise self.failure from None
                if session.active_contexts or time.monotonic() - opened >= limits.max_session_s:
                    continue
                raise ProtocolError("idle_timeout", f"no message for {limits.idle_timeout_s:g} s",
                                    close_code=WS_4008_TIMEOUT) from None
            finally:
                self._timeout = None
            if self.writer_task.done():
                self.writer_task.result()  # the socket broke while writing: surface it
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
                    raise ProtocolError("rate_limited",
                                        f"over {limits.max_messages_per_s:g} messages a second; dropped")
                session.handle(parse_message(text))
            except ProtocolError as exc:
                if exc.fatal:
                    raise
                session.metrics.errors.labels(exc.code).inc()
                writer.put_urgent(exc.to_json())

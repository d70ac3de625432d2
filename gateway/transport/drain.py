"""Graceful shutdown, the app's side: which sessions and HTTP streams are live, and how each is brought to an end.

`start()` (SIGTERM, see shutdown.py) turns the gateway to draining: /health answers 503, new sessions and speech
requests are refused, and every session is told (`session.draining` with the grace) and opens no new context. Its
live contexts may finish until the deadline; then what is left is cancelled (`context.cancelled`), the session gets
a final `error` `shutting_down` after its last frame, and closes 1001 (session/endpoint.py; a client that does not
read is not waited for). HTTP streams run on until the deadline too;
the server aborts what is still open after it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from voxgate.gateway.protocol import Clear

log = logging.getLogger("voxgate.drain")

POLL_S = 0.02  # how often a draining session checks its contexts (only while draining)


class Drain:
    def __init__(self, grace_s: float) -> None:
        self.grace_s = grace_s
        self.deadline: float | None = None  # loop time at which live contexts are cut; None: not draining
        self.http_streams = 0
        self._sessions: dict[Any, Callable[[], None]] = {}  # Session -> ends it (`shutting_down`, close 1001)
        self._tasks: set[asyncio.Task] = set()

    @property
    def draining(self) -> bool:
        return self.deadline is not None

    def seconds_left(self) -> float:
        return 0.0 if self.deadline is None else max(0.0, self.deadline - asyncio.get_running_loop().time())

    # ---- registration (session/endpoint.py, http/endpoints.py) ---------------------------------------------------

    def add_session(self, session: Any, end: Callable[[], None]) -> None:
        """`end()` ends the session with `shutting_down` and close 1001; called once its contexts are over."""
        self._sessions[session] = end
        if self.draining:
            self._drain_later(session)

    def remove_session(self, session: Any) -> None:
        self._sessions.pop(session, None)

    # ---- the drain (on the event loop) ----------------------------------------------------------------------

    def start(self) -> None:
        """Begin draining; a second call cuts the grace short (live contexts are cancelled at once)."""
        loop = asyncio.get_running_loop()
        if self.deadline is not None:
            self.deadline = min(self.deadline, loop.time())
            return
        self.deadline = loop.time() + self.grace_s
        log.info("draining %d session(s) and %d HTTP stream(s); grace %.1f s", len(self._sessions),
                 self.http_streams, self.grace_s)
        for session in list(self._sessions):
            self._drain_later(session)

    async def wait_idle(self, extra_s: float = 0.0) -> bool:
        """Wait until no session and no HTTP stream is left, or the deadline (+ `extra_s`) passed. True if idle."""
        loop = asyncio.get_running_loop()
        assert self.deadline is not None
        while self._sessions or self.http_streams:
            if loop.time() >= self.deadline + extra_s:
                return False
            await asyncio.sleep(POLL_S)
        return True

    def _drain_later(self, session: Any) -> None:
        task = asyncio.get_running_loop().create_task(self._drain_session(session))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _drain_session(self, session: Any) -> None:
        loop = asyncio.get_running_loop()
        assert self.deadline is not None
        session.begin_drain(self.seconds_left())
        while session.active_contexts and loop.time() < self.deadline:
            await asyncio.sleep(POLL_S)
        if session.active_contexts and session.started:
            session.handle(Clear())  # the grace is over: each live context gets its `context.cancelled`
        # The end comes after the last frame and `context.done`: a marker in the ordered queue (it sends nothing)
        # tells when the writer got past them.
        written = asyncio.Event()

        def past_the_last_frame() -> None:
            written.set()

        session.writer.put_event(past_the_last_frame)
        try:
            async with asyncio.timeout(max(0.05, self.seconds_left())):
                await written.wait()
        except TimeoutError:
            pass  # a client that does not read: the server aborts its connection after the grace
        end = self._sessions.get(session)
        if end is not None:
            end()

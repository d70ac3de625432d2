"""Graceful shutdown, the server's side: SIGTERM (or SIGINT) drains the app, then the process always ends.

uvicorn's own shutdown closes WebSockets at once with 1012 and then waits, without a bound, for every connection,
so one client that stops reading keeps the process alive. Here the first signal starts the app's drain (drain.py)
and a watchdog; once the sessions are over (or the grace is), uvicorn shuts down, and connections still open
after a short close grace are aborted. The watchdog ends the process `HARD_EXIT_AFTER_S` after the grace whatever
still holds it (a thread, a stuck engine). A second signal cuts the grace short.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
from types import FrameType

import uvicorn

from .drain import Drain

log = logging.getLogger("voxgate.shutdown")

CLOSE_GRACE_S = 0.25  # after the drain: for close frames and last responses to go out before connections are cut
HARD_EXIT_AFTER_S = 1.5  # after the grace: the process exits whatever still holds it
HARD_EXIT_STATUS = 70  # EX_SOFTWARE: the drain did not finish by itself


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, drain: Drain) -> None:
        super().__init__(config)
        self.drain = drain
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drain_task: asyncio.Task | None = None
        self._watchdogs: list[threading.Timer] = []

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().startup(sockets)

    # ---- signals ---------------------------------------------------------------------------------------------

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """The signal handler (main thread): schedule the drain on the loop, and arm the hard deadline."""
        self._captured_signals.append(sig)  # uvicorn re-raises them after shutdown: the exit status tells the signal
        first = not self._watchdogs
        self._arm_watchdog((self.drain.grace_s if first else 0.0) + HARD_EXIT_AFTER_S)
        if self._loop is None:  # still starting: nothing to drain
            self.should_exit = True
            return
        self._loop.call_soon_threadsafe(self.request_drain)

    def request_drain(self) -> None:
        """Start draining (on the loop); called again, cut the grace short."""
        self.drain.start()
        if self._drain_task is None:
            self._drain_task = asyncio.get_running_loop().create_task(self._drain_then_exit())

    async def _drain_then_exit(self) -> None:
        if not await self.drain.wait_idle():
            # The grace is over: the last sessions are closing now (drain.py); give them the close grace.
            await self.drain.wait_idle(extra_s=CLOSE_GRACE_S)
        self.should_exit = True  # uvicorn's main loop notices within 0.1 s and calls shutdown()

    def _arm_watchdog(self, after_s: float) -> None:
        timer = threading.Timer(after_s, _hard_exit, args=(after_s,))
        timer.daemon = True
        timer.start()
        self._watchdogs.append(timer)

    # ---- shutdown ----------------------------------------------------------------------------------------------

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """Stop accepting, ask every connection to close, and abort those still open after the close grace."""
        for server in getattr(self, "servers", []):
            server.close()
        connections = self.server_state.connections
        for connection in list(connections):
            connection.shutdown()  # idle HTTP: closed; busy HTTP: after its response; WebSocket: close frame
        await self._until_closed(CLOSE_GRACE_S)
        if connections:
            log.warning("aborting %d connection(s) that did not close in time", len(connections))
            for connection in list(connections):
                transport = getattr(connection, "transport", None)
                if transport is not None:
                    transport.abort()
            await self._until_closed(0.1)  # connection_lost runs on the next loop iterations
        await super().shutdown(sockets)  # (every connection is gone: it goes on to the lifespan's shutdown)

    async def _until_closed(self, timeout_s: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.server_state.connections and loop.time() < deadline:
            await asyncio.sleep(0.01)


def _hard_exit(after_s: float) -> None:
    os.write(2, f"voxgate: still running {after_s:.1f} s after the shutdown signal; exiting now\n".encode())
    os._exit(HARD_EXIT_STATUS)

"""A loopback TCP proxy that can hold back server -> client delivery once, for the pause tests.

It runs its own asyncio loop in a thread; `pause(ms)` makes the server -> client pump stop forwarding for that
long from now (what it reads meanwhile waits in the proxy and the kernel buffers, as on a congested link), while
client -> server traffic (playback reports) keeps flowing. `hold()` stops it until `release()`, for a test that
looks at the page between sending and hearing back.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time


class PausingProxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = 0
        self.pauses: list[tuple[float, float]] = []  # (monotonic start, seconds) actually applied
        self._hold_until = 0.0
        self._held = False
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task] = set()

    def __enter__(self) -> PausingProxy:
        self._thread.start()
        self._ready.wait(5)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def pause(self, ms: float) -> None:
        """Hold server -> client bytes for `ms` from now."""
        start = time.monotonic()
        self._hold_until = start + ms / 1000
        self.pauses.append((start, ms / 1000))

    def hold(self) -> None:
        """Hold server -> client bytes until release()."""
        self._held = True

    def release(self) -> None:
        self._held = False

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_server(self._client, "127.0.0.1", 0))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            self._server.close()
            for task in self._tasks:
                task.cancel()
            self._loop.run_until_complete(asyncio.gather(*self._tasks, return_exceptions=True))
            self._loop.run_until_complete(self._server.wait_closed())
            self._loop.close()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            writer.close()
            return
        try:
            await asyncio.gather(self._pump(reader, up_writer, hold=False), self._pump(up_reader, writer, hold=True))
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            for w in (writer, up_writer):
                with contextlib.suppress(Exception):
                    w.close()
            self._tasks.discard(task)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, hold: bool) -> None:
        while data := await reader.read(65536):
            if hold and (wait := self._hold_until - time.monotonic()) > 0:
                await asyncio.sleep(wait)
            while hold and self._held:
                await asyncio.sleep(0.005)  # polled: hold() and release() come from the test's thread
            writer.write(data)
            await writer.drain()
        with contextlib.suppress(OSError):
            writer.write_eof()

"""A closed connection's asyncio transport freed by reference counting, not by the garbage collector.

asyncio's selector transport (CPython 3.11-3.13) keeps its read callback as a bound method of itself, a reference
cycle that outlives the connection: every connection would leave its transport, socket and protocol (with the
session behind it) for a collector pass to find, and those passes stop the engine loop and the event loop alike.
The read callback is unused once the connection is lost (the reader is removed before `connection_lost` runs), so
the protocols break the cycle there.
"""

from __future__ import annotations

import asyncio


def _closed() -> None:  # stands in for the read callback of a lost connection
    return None


def release_transport(transport: asyncio.BaseTransport | None) -> None:
    if transport is not None and getattr(transport, "_read_ready_cb", None) is not None:
        transport._read_ready_cb = _closed  # type: ignore[attr-defined]

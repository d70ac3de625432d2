"""A session that speaks many contexts keeps only their ids (and its track the last 64, to place stalls): ended
contexts are released (memory stays flat, and
the garbage collector's older generations do not fill with them: a generation-1 pass over dead contexts once stalled
the event loop ~70 ms at c = 64)."""

from __future__ import annotations

import asyncio
import gc

from voxgate.client.protocol_client import VoxgateClient
from voxgate.gateway.session.context import Context


async def test_ended_contexts_are_released(gateway, fake_engine):
    server = gateway(engine=fake_engine(device_rtf=500, chunk_ms=80))
    async with VoxgateClient(server.ws_url, pacing="asap") as client:
        for i in range(100):
            await client.speak(f"turn-{i}", "A short turn.")
        gc.collect()
        alive = [o for o in gc.get_objects() if isinstance(o, Context)]
        # the track keeps its last 64 for stall attribution; nothing else keeps an ended context
        assert len(alive) <= 64 + 1, len(alive)
        # an ended context's id stays used: speaking into it again is an error, not a new context
        await client.send({"type": "text.append", "context_id": "turn-3", "text": "again"})
        for _ in range(200):
            if client.errors:
                break
            await asyncio.sleep(0.01)
        assert client.errors and client.errors[-1]["code"] == "unknown_context"
        assert "has ended" in client.errors[-1]["message"]

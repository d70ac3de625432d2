"""What a busy gateway leaves for Python's garbage collector (docs/benchmarks/gateway-2core/gc-lag/report.md): a
finished context is freed by reference counting at once (no cycle, no history holding it), while a stall reported
after its context ended is still placed in it and counted on its track."""

from __future__ import annotations

import asyncio
import gc
import json

import pytest
from support import connect
from voxgate.client.protocol_client import VoxgateClient
from voxgate.gateway.session.context import Context


def live_contexts() -> int:
    return sum(1 for o in gc.get_objects() if type(o) is Context)


@pytest.mark.slow
@pytest.mark.parametrize("pacing", ["asap", "client_clock"])
async def test_finished_contexts_are_freed_without_the_collector(gateway, fake_engine, pacing):
    server = gateway(engine=fake_engine(device_rtf=1000, chunk_ms=100))
    gc.collect()
    before = live_contexts()
    gc.disable()  # only reference counting frees anything now: a context in a cycle (or kept in a history) stays
    try:
        async with VoxgateClient(server.ws_url, pacing=pacing, voice="tone-a") as client:
            for i in range(12):
                result = await client.speak(f"c{i}", "two words.")
                assert result.event("context.done") is not None
            await asyncio.sleep(0.05)
            # The one the track started last is kept (a late stall may still be placed in it); none of the others.
            assert live_contexts() - before <= 1
    finally:
        gc.enable()


async def test_a_stall_in_an_ended_context_is_named_and_counted_by_cause(gateway, fake_engine):
    server = gateway(engine=fake_engine(device_rtf=1000, chunk_ms=100))
    ws, _ = await connect(server.ws_url, metrics_interval_ms=100, pacing={"mode": "client_clock",
                                                                         "target_buffer_ms": 1000})
    ends = {}
    for context_id in ("first", "second"):  # 0.74 s each, sent within the 1 s buffer target
        await ws.send(json.dumps({"type": "text.append", "context_id": context_id, "text": "two words."}))
        await ws.send(json.dumps({"type": "context.end", "context_id": context_id}))
        while context_id not in ends:
            raw = await asyncio.wait_for(ws.recv(), 5)
            if isinstance(raw, str) and json.loads(raw)["type"] == "context.done":
                ends[context_id] = json.loads(raw)["end_pts"]
    # The player ran dry inside the first context, after the second one had started: an old context's stall.
    await ws.send(json.dumps({"type": "playback", "played_pts": 2400, "buffered_samples": 0,
                              "underruns": {"events": 2, "samples": 2400, "max_gap_ms": 60, "last_pts": 2400}}))
    stall = metrics = None
    while stall is None or metrics is None or not metrics["underruns"]["events"]:
        raw = await asyncio.wait_for(ws.recv(), 5)
        if isinstance(raw, str):
            m = json.loads(raw)
            stall = m if m["type"] == "stall" else stall
            metrics = m if m["type"] == "metrics" else metrics
    assert ends["first"] > 2400 and stall["context_id"] == "first" and stall["events"] == 2
    # The causes add up to the track's events: every stall on the track, not those of its recent contexts only.
    assert sum(metrics["underruns"]["by_cause"].values()) == metrics["underruns"]["events"] == 2
    await ws.close()

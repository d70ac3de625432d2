"""Issue 13 point 1: a `playback` report's claims are bounded, checked against what the server sent, and cost O(1);
a hostile one is answered with `invalid_message` while another session keeps speaking without a pause."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest
from support import bystander_until_heard, connect, next_error, next_json

HOSTILE = [
    ({"events": 10**6, "samples": 1200, "max_gap_ms": 50}, "exceeds the frames sent"),
    ({"events": 2**62, "samples": 2**62, "max_gap_ms": 1}, "expected `int` <= 9007199254740992"),  # the parser's
    ({"events": 1, "samples": 24000 * 3600, "max_gap_ms": 50}, "exceed the time"),
    ({"events": 1, "samples": 1200, "max_gap_ms": 1e12}, "exceed the time"),
    ({"events": 1, "samples": 1200, "last_pts": 2**40}, "last_pts"),
]


@pytest.mark.slow
async def test_hostile_reports_are_refused_at_once_and_nobody_else_pauses(gateway, fake_engine):
    server = gateway(engine=fake_engine(device_rtf=100, chunk_ms=100))
    started = asyncio.Event()
    listener = asyncio.create_task(bystander_until_heard(server.ws_url, started))
    await started.wait()
    ws, _ = await connect(server.ws_url, pacing={"mode": "client_clock"})
    await ws.send(json.dumps({"type": "text.append", "context_id": "h", "text": "word " * 20 + ". "}))
    frames = 0
    while frames < 3:
        frames += isinstance(await asyncio.wait_for(ws.recv(), 5), bytes)
    seen: list[dict] = []  # every JSON message the hostile session got

    async def next_error_seen() -> dict:
        while True:
            seen.append(message := await next_json(ws, timeout=2))
            if message["type"] in ("error", "warning"):
                return message

    for underruns, reason in HOSTILE:
        t0 = time.monotonic()
        for _ in range(3):
            await ws.send(json.dumps({"type": "playback", "played_pts": 0, "buffered_samples": 0,
                                      "underruns": underruns}))
        for _ in range(3):
            error = await next_error_seen()
            assert error["code"] == "invalid_message" and reason in error["message"] and not error["fatal"]
        assert time.monotonic() - t0 < 1.0, underruns
        await asyncio.sleep(0.3)  # spread over the listener's playback
    await ws.send(json.dumps({"type": "ping", "t_ms": 1}))  # the session still works
    while (message := await next_json(ws))["type"] != "pong":
        seen.append(message)
    await listener  # spoke to the end without a pause over 10 ms (one the server caused)
    # Nothing the hostile reports claimed was counted: a counted stall is a `stall` message to its session. (The
    # server-wide counter may hold the bystander's own: on a loaded machine its player can read frames late, and
    # the server rightly counts that as `network`.)
    assert not [m for m in seen if m["type"] == "stall"]
    await ws.send(json.dumps({"type": "clear"}))
    while (await next_json(ws))["type"] != "context.cancelled":
        pass
    await ws.close()


async def test_positions_past_what_was_sent_are_refused(gateway, fake_engine):
    server = gateway(engine=fake_engine(device_rtf=100))
    ws, _ = await connect(server.ws_url, pacing={"mode": "client_clock"})
    await ws.send(json.dumps({"type": "playback", "played_pts": 10**9, "buffered_samples": 0}))
    error = await next_error(ws)
    assert error["code"] == "invalid_message" and "past what was sent" in error["message"]
    await ws.close()


async def test_many_new_stalls_in_one_report_are_one_message_with_their_count(gateway, fake_engine):
    server = gateway(engine=fake_engine(device_rtf=100, chunk_ms=100))
    ws, _ = await connect(server.ws_url, pacing={"mode": "client_clock"})
    await ws.send(json.dumps({"type": "text.append", "context_id": "s", "text": "word " * 20 + ". "}))
    frames = 0
    while frames < 6:
        frames += isinstance(await asyncio.wait_for(ws.recv(), 5), bytes)
    await ws.send(json.dumps({"type": "playback", "played_pts": 480, "buffered_samples": 0,
                              "underruns": {"events": 4, "samples": 2400, "max_gap_ms": 40}}))
    stall = None
    while stall is None:
        raw = await asyncio.wait_for(ws.recv(), 5)
        if isinstance(raw, str) and json.loads(raw)["type"] == "stall":
            stall = json.loads(raw)
    assert stall["events"] == 4 and stall["duration_ms"] == 100.0 and stall["context_id"] == "s"
    text = httpx.get(server.http_url + "/metrics").text
    counted = {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
               if line.startswith("voxgate_stall_events_total{")}
    assert sum(counted.values()) == 4
    await ws.close()

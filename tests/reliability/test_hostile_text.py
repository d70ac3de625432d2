"""Issue 23, finding 1: one message must never freeze the server. A text.append or an HTTP input of 10,000 "." (or
"?", "!", "...") blocked the event loop for 15-20 s (the sentence splitter backtracked quadratically on runs of
sentence-end characters). A bystander session pings all the while; every pong must come back within a generous
bound (the splitter's own work is counted in tests/test_textsplit.py)."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest
from support import connect
from voxgate.gateway.config import Limits

MAX_TEXT = Limits().max_text_chars
HOSTILE = [ch * MAX_TEXT for ch in ".?!…"] + ["..." * (MAX_TEXT // 3), '."' * (MAX_TEXT // 2)]
PONG_BOUND_S = 2.0  # generous for a shared 2-core machine; the freeze was 15-31 s


async def _ping_until(url: str, stop: asyncio.Event) -> list[float]:
    """Round trips of pings sent back to back until `stop`; a pong that takes over 10 s fails the test."""
    ws, _ = await connect(url, pacing={"mode": "asap"})
    round_trips = []
    try:
        while not stop.is_set() or len(round_trips) < 5:
            sent = time.monotonic()
            await ws.send(json.dumps({"type": "ping", "t_ms": sent * 1000}))
            while True:
                message = json.loads(await asyncio.wait_for(ws.recv(), 10))
                if message["type"] == "pong":
                    break
            round_trips.append(time.monotonic() - sent)
            await asyncio.sleep(0.02)
    finally:
        await ws.close()
    return round_trips


async def _hostile_session(url: str) -> None:
    ws, _ = await connect(url, pacing={"mode": "asap"})
    try:
        for i, text in enumerate(HOSTILE):
            await ws.send(json.dumps({"type": "text.append", "context_id": f"h{i}", "text": text}))
            await ws.send(json.dumps({"type": "context.end", "context_id": f"h{i}"}))
        await ws.send(json.dumps({"type": "ping"}))
        while json.loads(await asyncio.wait_for(_next_text(ws), 30))["type"] != "pong":
            pass  # every hostile message has been taken in once the pong after them arrives
    finally:
        await ws.close()


async def _next_text(ws) -> str:
    while True:
        raw = await ws.recv()
        if isinstance(raw, str):
            return raw


async def _hostile_request(http_url: str, text: str) -> int:
    async with httpx.AsyncClient(timeout=60) as client:
        body = {"model": "tts-1", "input": text, "voice": "alloy", "response_format": "pcm"}
        async with client.stream("POST", http_url + "/v1/audio/speech", json=body) as response:
            async for _ in response.aiter_bytes():
                break  # the first bytes: the input has been cut and is being spoken
            return response.status_code


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["fake", "espeak"])
async def test_runs_of_sentence_ends_never_freeze_a_bystander(serve, engine):
    served = serve("", "--engine", engine)
    stop = asyncio.Event()
    pinging = asyncio.create_task(_ping_until(served.ws_url, stop))
    await asyncio.sleep(0.2)  # the bystander is pinging before the hostile text arrives
    statuses = await asyncio.gather(_hostile_session(served.ws_url),
                                    *(_hostile_request(served.http_url, text) for text in HOSTILE[:3]))
    stop.set()
    round_trips = await pinging
    assert statuses[1:] == [200, 200, 200]
    assert max(round_trips) < PONG_BOUND_S, sorted(round_trips)[-5:]
    assert served.proc.poll() is None

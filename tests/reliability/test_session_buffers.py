"""Issue 23, finding 3: every per-session buffer a client can fill is counted by a documented limit. Pending flush
ids were unbounded (+92 MB per session in 20 s, 64 KB kept per pending flush); the ids of a session's contexts too."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from support import connect, next_json
from voxgate.gateway.config import Limits


async def _answers(ws, count: int, timeout: float = 10.0) -> list[dict]:
    """The next `count` JSON messages that answer flushes: `flushed` or `error` (audio and the rest skipped)."""
    out = []
    while len(out) < count:
        message = await next_json(ws, timeout)
        if message["type"] in ("flushed", "error"):
            out.append(message)
    return out


async def test_a_flush_id_over_the_limit_is_refused_by_name_and_the_session_goes_on(gateway, fake_engine):
    server = gateway(engine=fake_engine(), limits=Limits(max_flush_id_chars=16))
    ws, started = await connect(server.ws_url, pacing={"mode": "asap"})
    assert started["limits"]["max_flush_id_chars"] == 16
    await ws.send(json.dumps({"type": "text.append", "context_id": "a", "text": "Hello there. "}))
    await ws.send(json.dumps({"type": "context.flush", "context_id": "a", "flush_id": "x" * 17}))
    await ws.send(json.dumps({"type": "context.flush", "context_id": "a", "flush_id": "y" * 16}))
    first, second = await _answers(ws, 2)
    assert first["type"] == "error" and first["code"] == "flush_limit" and not first["fatal"]
    assert "limits.max_flush_id_chars" in first["message"] and first["context_id"] == "a"
    assert second == {**second, "type": "flushed", "flush_id": "y" * 16}
    await ws.close()


async def test_pending_flushes_are_counted_per_session_and_freed_by_their_acks(gateway, fake_engine):
    """client_clock pacing with no playback reports holds the audio (and the flush marks behind it) back: the
    session's pending flushes stop at the limit, over two contexts; once acknowledged, flushes are taken again."""
    server = gateway(engine=fake_engine(), limits=Limits(max_pending_flushes=4))
    ws, started = await connect(server.ws_url, pacing={"mode": "client_clock"})
    assert started["limits"]["max_pending_flushes"] == 4
    for context_id in ("a", "b"):
        await ws.send(json.dumps({"type": "text.append", "context_id": context_id, "text": "word " * 60 + "."}))
    for i in range(6):
        await ws.send(json.dumps({"type": "context.flush", "context_id": "ab"[i % 2], "flush_id": i}))
    refused = await _answers(ws, 2)
    assert [m["code"] for m in refused] == ["flush_limit", "flush_limit"]
    assert "limits.max_pending_flushes (4)" in refused[0]["message"]
    # The listener lets go: cancelling frees the marks (their audio will never be heard) and a flush is taken again.
    await ws.send(json.dumps({"type": "clear"}))
    await ws.send(json.dumps({"type": "text.append", "context_id": "c", "text": "Again. "}))
    await ws.send(json.dumps({"type": "context.flush", "context_id": "c", "flush_id": "after"}))
    await ws.send(json.dumps({"type": "playback", "played_pts": 0, "buffered_samples": 0}))
    deadline = time.monotonic() + 20
    while True:
        message = await next_json(ws, 10)
        assert message["type"] != "error", message
        if message["type"] == "flushed" and message["flush_id"] == "after":
            break
        assert time.monotonic() < deadline
    await ws.close()


async def test_a_session_opens_at_most_max_session_contexts(gateway, fake_engine):
    server = gateway(engine=fake_engine(), limits=Limits(max_session_contexts=3))
    ws, _ = await connect(server.ws_url, pacing={"mode": "asap"})
    for i in range(3):
        await ws.send(json.dumps({"type": "context.open", "context_id": f"c{i}"}))
        await ws.send(json.dumps({"type": "context.cancel", "context_id": f"c{i}"}))
    await ws.send(json.dumps({"type": "context.open", "context_id": "c3"}))
    while (message := await next_json(ws))["type"] != "error":
        pass
    assert message["code"] == "context_limit" and "limits.max_session_contexts (3)" in message["message"]
    await ws.close()


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


async def _flood(url: str, seconds: float, per_s: float, id_chars: int) -> dict[str, int]:
    """One session speaking a long text, sending flushes with ids of `id_chars` at `per_s` for `seconds`."""
    ws, _ = await connect(url)
    codes: dict[str, int] = {}

    async def read() -> None:
        while True:
            raw = await ws.recv()
            if isinstance(raw, str) and (message := json.loads(raw))["type"] in ("error", "flushed"):
                key = message.get("code", "flushed")
                codes[key] = codes.get(key, 0) + 1

    reader = asyncio.create_task(read())
    await ws.send(json.dumps({"type": "text.append", "context_id": "a", "text": "word " * 2000}))
    end = time.monotonic() + seconds
    i = 0
    while time.monotonic() < end:
        flush_id = f"{i:08d}" * (id_chars // 8)
        await ws.send(json.dumps({"type": "context.flush", "context_id": "a", "flush_id": flush_id}))
        i += 1
        await asyncio.sleep(1 / per_s)
    await asyncio.sleep(0.5)
    reader.cancel()
    await ws.close()
    return codes


@pytest.mark.slow
@pytest.mark.parametrize("id_chars", [65_000 - 200, 128])
async def test_four_sessions_flooding_flushes_cost_the_server_little_memory(serve, id_chars):
    """The issue's probe, shortened: 4 sessions sending 150 flushes a second (ids of 64 KB, or valid short ones) grow
    the server by under 50 MB, each flush over the limits refused with `flush_limit`."""
    served = serve()
    before = _rss_mb(served.proc.pid)
    results = await asyncio.gather(*(_flood(served.ws_url, 6.0, 150, id_chars) for _ in range(4)))
    grown = _rss_mb(served.proc.pid) - before
    assert grown < 50, grown
    for codes in results:
        assert set(codes) <= {"flush_limit", "flushed"}, codes
        assert codes.get("flush_limit", 0) > 0, codes
        if id_chars > Limits().max_flush_id_chars:
            assert "flushed" not in codes

"""The bound on engine chunks taken in per event-loop iteration (gateway/transport/loop_turns.py, `loop_chunk_turns`):
at most that many per iteration, first come first served, a cancelled waiter gives its place up; on a real server, many
sessions behind a bound of one chunk per iteration still get all their audio, exact and in order, and a cancel
of a context waiting for its turn is answered."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
from support import connect, next_json
from voxgate.client.protocol_client import VoxgateClient
from voxgate.engine.fake import fake_audio, fake_duration_samples
from voxgate.gateway.transport.loop_turns import LoopTurns


async def test_at_most_the_bound_per_iteration_in_arrival_order():
    turns = LoopTurns(2)
    iteration = 0
    order: list[tuple[int, int]] = []  # (caller, iteration its turn came in)

    async def ticker():
        nonlocal iteration
        while True:
            await asyncio.sleep(0)
            iteration += 1

    async def caller(i: int):
        turn = turns.take()
        if turn is not None:
            await turn
        order.append((i, iteration))

    tick = asyncio.create_task(ticker())
    await asyncio.gather(*(caller(i) for i in range(7)))
    tick.cancel()
    assert [i for i, _ in order] == list(range(7))
    per_iteration: dict[int, int] = {}
    for _, it in order:
        per_iteration[it] = per_iteration.get(it, 0) + 1
    assert max(per_iteration.values()) <= 2 and len(per_iteration) >= 4


async def test_a_cancelled_waiter_gives_its_place_up_and_no_bound_means_no_wait():
    turns = LoopTurns(1)
    assert turns.take() is None
    first, second = turns.take(), turns.take()
    assert first is not None and second is not None and turns.waiting == 2
    first.cancel()
    await asyncio.wait_for(second, 1)
    assert turns.waiting == 0
    assert LoopTurns(0).take() is None


async def test_sessions_behind_a_bound_of_one_chunk_get_all_their_audio(gateway, fake_engine):
    server = gateway(engine=fake_engine(device_rtf=1000, chunk_ms="100,200"), loop_chunk_turns=1)
    texts = [f"session {i} speaks a few words here." for i in range(8)]

    async def speak(i: int) -> np.ndarray:
        async with VoxgateClient(server.ws_url, pacing="asap", voice="tone-a", frame_ms=1280) as client:
            result = await client.speak("c", texts[i])
            assert result.event("context.done") is not None and not client.errors
            return result.audio

    audio = await asyncio.gather(*(speak(i) for i in range(8)))
    for text, got in zip(texts, audio, strict=True):
        np.testing.assert_array_equal(got, fake_audio(text, "tone-a", fake_duration_samples(text)))


@pytest.mark.slow
async def test_a_context_waiting_for_its_turn_is_cancelled_at_once(gateway, fake_engine):
    server = gateway(engine=fake_engine(device_rtf=1000, chunk_ms=20), loop_chunk_turns=1)
    busy = [await connect(server.ws_url, pacing={"mode": "asap"}) for _ in range(4)]
    for ws, _ in busy:  # 74 s of audio each in 20 ms chunks: a queue for the turns
        await ws.send(json.dumps({"type": "text.append", "context_id": "long", "text": "word " * 200 + ". "}))
    ws, _ = await connect(server.ws_url, pacing={"mode": "asap"})
    await ws.send(json.dumps({"type": "text.append", "context_id": "x", "text": "word " * 200 + ". "}))
    while (await next_json(ws))["type"] != "context.started":
        pass
    await ws.send(json.dumps({"type": "context.cancel", "context_id": "x"}))
    while (message := await next_json(ws, timeout=2))["type"] != "context.cancelled":
        pass
    assert message["context_id"] == "x"
    # The busy sockets were never read: their close handshakes wait behind the audio queued for them, up to
    # websockets' close_timeout each (10 s), so they close at once and side by side.
    for other, _ in busy:
        other.close_timeout = 0.5
    await asyncio.gather(*(other.close() for other in [ws, *(b for b, _ in busy)]))

"""Pacing against a simulated player on the real clock (client_clock), and the asap and realtime modes."""

from __future__ import annotations

import asyncio
import time

import pytest
from support import no_pause_from_the_server, server_caused
from voxgate.client.protocol_client import VoxgateClient
from voxgate.gateway.transport.loop_lag import watch_loop_lag

# Harvard sentences (IEEE 1969, public domain), list 1: a ~20 s passage at espeak's default rate.
PASSAGE = ("The birch canoe slid on the smooth planks. Glue the sheet to the dark blue background. "
           "It's easy to tell the depth of a well. These days a chicken leg is a rare dish. "
           "Rice is often served in round bowls. The juice of lemons makes fine punch. "
           "The box was thrown beside the parked truck. The hogs were fed chopped corn and garbage. "
           "Four hours of steady work faced us. A large size in stockings is hard to sell.")


@pytest.mark.slow
@pytest.mark.parametrize("stream_words", [None, 3])
async def test_client_clock_keeps_the_buffer_bounded_and_never_gaps(gateway, stream_words):
    server = gateway()
    lags: list[float] = []  # this process's own event-loop lags: while its loop is held, frames wait in the socket
    watcher = asyncio.create_task(watch_loop_lag(lags.append, 0.005))
    async with VoxgateClient(server.ws_url, pacing="client_clock", target_buffer_ms=150,
                             max_buffer_ms=1000) as client:
        t0 = time.monotonic()
        result = await client.speak("p", PASSAGE, words_per_message=stream_words, delay_s=0.02)
        player = client.player
        await player.drained()
        duration = len(result.audio) / client.rate
        elapsed = time.monotonic() - t0
        await no_pause_from_the_server(client)  # (a gap this loaded test process caused itself is the client's)
    watcher.cancel()
    assert duration > 18, f"the passage should be ~20 s, got {duration:.1f} s"
    assert player.position() == player.received_end  # everything was played
    # The buffer stayed within [0, max_buffer]: paced to the target, not dumped.
    max_buffer = client.rate * 1.0
    assert 0 <= player.max_buffered <= max_buffer
    # target + a frame + timer slack, plus what arrived while this (loaded) test process itself stalled the player:
    # that audio waited in the socket and lands at once when the process runs again (the server is cleared above).
    # A stall shorter than the buffer leaves no underrun but still delivers its audio at once: its longest loop lag.
    held = int(max(lags, default=0.0) * client.rate)
    assert player.max_buffered <= client.rate * (0.150 + 0.040 + 0.030) + player.underrun_samples + held
    assert elapsed > duration - 0.5  # delivered over the playback time, not ahead of it
    # context.done counts what its stall messages said: none the server caused (a late send while the loaded
    # machine held the server's loop is excused above, with its message)
    by_cause = result.event("context.done")["stalls"]["by_cause"]
    pacing = [m for m in client.messages if m["type"] == "stall" and m["cause"] == "pacing"]
    excused = sum(m["events"] for m in pacing if m not in server_caused(pacing))
    assert by_cause["generation"] == 0 and by_cause["pacing"] <= excused, (by_cause, client.messages)


@pytest.mark.perf
async def test_asap_delivers_as_fast_as_produced(gateway, fake_engine):
    engine = fake_engine(device_rtf=10, chunk_ms=200)
    server = gateway(engine=engine)
    async with VoxgateClient(server.ws_url, pacing="asap") as client:
        t0 = time.monotonic()
        result = await client.speak("a", "word " * 16)  # 16 words x 0.37 s = 5.92 s of audio
        elapsed = time.monotonic() - t0
    duration = len(result.audio) / client.rate
    assert duration == pytest.approx(5.92, abs=0.01)
    production = duration / 10
    assert production - 0.05 < elapsed < production + 0.4, (elapsed, production)
    # Each chunk is forwarded the moment it exists: arrivals follow the engine's 20 ms-per-chunk pace.
    arrivals = [t for _, _, t in result.frames]
    assert arrivals[-1] - arrivals[0] > production * 0.7


@pytest.mark.perf
async def test_realtime_sends_at_one_x_with_a_fixed_lead(gateway, fake_engine):
    server = gateway(engine=fake_engine(device_rtf=50, chunk_ms=400))
    async with VoxgateClient(server.ws_url, pacing="realtime", target_buffer_ms=200) as client:
        result = await client.speak("r", "word " * 8)  # 2.96 s
    rate = client.rate
    t_first = result.frames[0][2]
    received = 0
    for header, _, arrival in result.frames:
        received += header.samples
        lead = received / rate - (arrival - t_first)
        # Never more than the lead (plus a frame and timer slack) ahead of a 1x clock started at the first frame,
        # and never behind it (the listener would starve).
        assert lead <= 0.200 + 0.020 + 0.025, lead
        assert lead >= 0.0, lead
    total = result.frames[-1][2] - t_first
    assert total == pytest.approx(received / rate - 0.2, abs=0.1)


async def test_a_cancel_frees_the_pacing_budget_for_the_next_context(gateway, fake_engine):
    # The client reported no progress; without the cancel resetting the estimate, the dropped audio would count as
    # still buffered at the client and the next context would never be sent.
    import json

    from support import connect

    server = gateway(engine=fake_engine(device_rtf=100))
    ws, _ = await connect(server.ws_url, pacing={"mode": "client_clock", "target_buffer_ms": 150})
    await ws.send(json.dumps({"type": "text.append", "context_id": "a", "text": "word " * 30 + ". "}))
    frames = 0
    while frames < 7:  # the 150 ms burst
        frames += isinstance(await asyncio.wait_for(ws.recv(), 5), bytes)
    async def idle_player() -> None:  # reports every 50 ms: nothing played, nothing buffered
        while True:
            await ws.send(json.dumps({"type": "playback", "played_pts": 0, "buffered_samples": 0}))
            await asyncio.sleep(0.05)

    reports = asyncio.create_task(idle_player())
    await asyncio.sleep(0.1)
    await ws.send(json.dumps({"type": "context.cancel", "context_id": "a"}))
    await ws.send(json.dumps({"type": "text.append", "context_id": "b", "text": "word " * 30 + ". "}))
    got = 0
    deadline = time.monotonic() + 1.0
    while got < 7 and time.monotonic() < deadline:
        try:
            raw = await asyncio.wait_for(ws.recv(), max(0.01, deadline - time.monotonic()))
        except TimeoutError:
            break
        got += isinstance(raw, bytes)
    reports.cancel()
    assert got >= 7, f"only {got} frames of the next context within 1 s"
    await ws.close()


@pytest.mark.slow
@pytest.mark.parametrize("rtf", [100, 3])
async def test_a_disconnect_mid_stream_ends_the_session_at_once(gateway, fake_engine, rtf):
    # Regression: a cancel swallowed by asyncio.wait_for left the paced sender running and the session open.
    import httpx

    server = gateway(engine=fake_engine(device_rtf=rtf))
    for round_ in range(5):
        async with VoxgateClient(server.ws_url, pacing="client_clock") as client:
            await client.send({"type": "text.append", "context_id": f"d{round_}", "text": "word " * 40 + ". "})
            await asyncio.sleep(0.2 + 0.05 * round_)
        deadline = time.monotonic() + 2
        while httpx.get(server.http_url + "/health").json()["sessions"] and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert httpx.get(server.http_url + "/health").json()["sessions"] == 0

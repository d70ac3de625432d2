"""Text streaming (issue 18, docs/protocol.md "Text streaming") against a real server on the fake engine: one
engine stream per stretch of fast text, sentence mode for slow text and for engines without the capability."""

from __future__ import annotations

import asyncio
import json
import random

import pytest
from support import connect, server_caused
from test_ws_stream import check_order, collect_until
from voxgate.client.protocol_client import VoxgateClient
from voxgate.engine.fake import SECONDS_PER_WORD
from voxgate.gateway.protocol import FrameHeader

WORD_SAMPLES = round(SECONDS_PER_WORD * 24_000)  # the fake engine's audio per word, in either mode
FIRST = "The birch canoe slid on the smooth planks of the old wooden dock by the lake."  # 16 words
TEXT = FIRST + " Glue the sheet to the dark blue background. It is easy to tell the depth of a well."


def random_pieces(text: str, rng: random.Random) -> list[str]:
    """`text` cut at random places (mid-word too), 1 to 12 characters a piece."""
    pieces, i = [], 0
    while i < len(text):
        n = rng.randint(1, 12)
        pieces.append(text[i : i + n])
        i += n
    return pieces


async def stream_text(ws, cid: str, pieces: list[str], rng: random.Random, max_delay_s: float = 0.02) -> float:
    """Send the pieces with random small delays; returns when the piece that ends FIRST was sent."""
    sent, first_sentence_done = "", None
    for piece in pieces:
        await ws.send(json.dumps({"type": "text.append", "context_id": cid, "text": piece}))
        sent += piece
        if first_sentence_done is None and len(sent) > len(FIRST):  # the "." is confirmed by the next character
            first_sentence_done = asyncio.get_running_loop().time()
        await asyncio.sleep(rng.uniform(0, max_delay_s))
    return first_sentence_done


async def speak_pieces(url: str, pieces: list[str], rng: random.Random, end: bool = True) -> tuple[list, float, float]:
    """(messages, first audio time, first sentence complete time) of one context spoken from `pieces`."""
    ws, _ = await connect(url, pacing={"mode": "asap"})
    received: list = []
    first_audio: list[float] = []

    async def receive() -> None:
        while True:
            raw = await ws.recv()
            if isinstance(raw, bytes) and not first_audio:
                first_audio.append(asyncio.get_running_loop().time())
            received.append(raw if isinstance(raw, bytes) else json.loads(raw))
            if isinstance(raw, str) and received[-1]["type"] == "context.done":
                return

    reader = asyncio.get_running_loop().create_task(receive())
    first_done = await stream_text(ws, "a", pieces, rng)
    await ws.send(json.dumps({"type": "context.end", "context_id": "a"}))
    await asyncio.wait_for(reader, 20)
    await ws.close()
    return received, first_audio[0], first_done


@pytest.mark.slow
async def test_word_by_word_audio_starts_before_the_first_sentence_ends_and_is_contiguous(gateway, fake_engine):
    rng = random.Random(18)
    engine = fake_engine(device_rtf=50, chunk_ms=80)
    server = gateway(engine=engine)
    messages, first_audio, first_done = await speak_pieces(server.ws_url, random_pieces(TEXT, rng), rng)
    frames: dict = {}
    check_order(messages, frames)
    assert first_audio < first_done, "no audio before the first sentence was complete"
    streams = [s for s in engine.streams if s.request.text_open]
    assert streams and len(engine.streams) <= 2, [s.request.text for s in engine.streams]
    (ctx_frames,) = frames.values()
    assert sum(FrameHeader.unpack(f).samples for f in ctx_frames) == len(TEXT.split()) * WORD_SAMPLES
    assert "".join(s.request.text + "".join(s.appended) for s in engine.streams) == TEXT


async def test_sentence_mode_and_text_streaming_give_the_same_audio_length(gateway, fake_engine):
    totals = {}
    for streaming in (True, False):
        rng = random.Random(7)
        engine = fake_engine(device_rtf=50, text_streaming=streaming)
        server = gateway(engine=engine)
        messages, _, _ = await speak_pieces(server.ws_url, random_pieces(TEXT, rng), rng)
        done = next(m for m in messages if isinstance(m, dict) and m["type"] == "context.done")
        totals[streaming] = done["end_pts"]
        assert all(s.request.text_open == streaming for s in engine.streams)
    assert totals[True] == totals[False] == len(TEXT.split()) * WORD_SAMPLES


async def test_flush_ends_the_stream_text_and_later_text_continues_on_the_timeline(gateway, fake_engine):
    engine = fake_engine(device_rtf=50, chunk_ms=80)
    server = gateway(engine=engine)
    ws, _ = await connect(server.ws_url, pacing={"mode": "asap"})
    before = "one two three four five six seven eight nine"  # no sentence end: only the flush ends it
    for word in before.split():
        await ws.send(json.dumps({"type": "text.append", "context_id": "a", "text": word + " "}))
        await asyncio.sleep(0.01)
    await ws.send(json.dumps({"type": "context.flush", "context_id": "a", "flush_id": "f"}))
    messages = await collect_until(ws, "flushed", "a")
    after = "and then the rest of it."
    for word in after.split():
        await ws.send(json.dumps({"type": "text.append", "context_id": "a", "text": word + " "}))
        await asyncio.sleep(0.01)
    await ws.send(json.dumps({"type": "context.end", "context_id": "a"}))
    messages += await collect_until(ws, "context.done", "a")
    await ws.close()
    frames: dict = {}
    check_order(messages, frames)
    flushed = next(m for m in messages if isinstance(m, dict) and m["type"] == "flushed")
    done = messages[-1]
    assert flushed["end_pts"] == 9 * WORD_SAMPLES  # every word before the flush, spoken before `flushed`
    assert done["end_pts"] == (9 + len(after.split())) * WORD_SAMPLES  # the rest follows on the same timeline
    assert len(engine.streams) == 2 and all(s.request.text_open for s in engine.streams)
    assert (engine.streams[0].request.text + "".join(engine.streams[0].appended)).split() == before.split()


async def test_cancel_mid_stream_no_frame_after_the_ack(gateway, fake_engine):
    engine = fake_engine(device_rtf=20, chunk_ms=40)
    server = gateway(engine=engine)
    ws, _ = await connect(server.ws_url, pacing={"mode": "asap"})
    for i in range(12):
        await ws.send(json.dumps({"type": "text.append", "context_id": "c", "text": f"word{i} "}))
        await asyncio.sleep(0.01)
    assert engine.streams and engine.streams[0].request.text_open
    await ws.send(json.dumps({"type": "context.cancel", "context_id": "c"}))
    messages = await collect_until(ws, "context.cancelled", "c")
    ctx = messages[-1]["ctx"]
    await ws.send(json.dumps({"type": "text.append", "context_id": "n", "text": "short one."}))
    await ws.send(json.dumps({"type": "context.end", "context_id": "n"}))
    after = await collect_until(ws, "context.done", "n")
    await ws.close()
    assert not any(isinstance(m, bytes) and FrameHeader.unpack(m).ctx == ctx for m in after)
    check_order(messages + after, {})


async def test_engines_without_the_capability_and_the_off_switch_keep_sentence_mode(gateway, fake_engine):
    for engine, config in ((fake_engine(text_streaming=False), {}), (fake_engine(), {"text_streaming": "off"})):
        server = gateway(engine=engine, **config)
        rng = random.Random(3)
        messages, _, _ = await speak_pieces(server.ws_url, random_pieces(TEXT, rng), rng)
        check_order(messages, {})
        assert [s.request.text for s in engine.streams] == [
            FIRST, "Glue the sheet to the dark blue background.", "It is easy to tell the depth of a well."]
        assert not any(s.request.text_open for s in engine.streams)


async def _listen_at_wps(url: str, text: str, wps: float) -> VoxgateClient:
    async with VoxgateClient(url, voice="tone-a") as client:  # client_clock: the simulated player reports
        result = client.context("s")
        await client.send({"type": "context.open", "context_id": "s"})
        for word in text.split():
            await client.send({"type": "text.append", "context_id": "s", "text": word + " "})
            result.sent_at = result.sent_at or asyncio.get_running_loop().time()
            await asyncio.sleep(1 / wps)
        await client.send({"type": "context.end", "context_id": "s"})
        await asyncio.wait_for(result.done.wait(), 20)
        await client.player.drained()
        # Every gap the player heard is reported and attributed before the session closes (up to 3 s).
        async with asyncio.timeout(3):
            while len(_stalls(client)) < len(client.player.gaps_over(0.010)):
                await asyncio.sleep(0.05)
        return client


def _stalls(client: VoxgateClient) -> list[dict]:
    return [m for m in client.messages if m.get("type") == "stall" and m["duration_ms"] > 5]


@pytest.mark.slow
async def test_slow_text_falls_back_and_pauses_no_more_than_sentence_mode(gateway, fake_engine):
    text = "Glue the sheet now. It is easy to tell. The rest is here."  # 12 words at 3 words/s: 4 s
    heard = {}
    for streaming in ("auto", "off"):
        engine = fake_engine(device_rtf=50, chunk_ms=80)
        server = gateway(engine=engine, text_streaming=streaming)
        client = await _listen_at_wps(server.ws_url, text, 3.0)
        # The pauses the server caused (waiting for text is `generation`); one this loaded client caused by
        # reading late (`network`, `client`), or the machine by holding the server's loop, says nothing of the mode.
        heard[streaming] = server_caused(_stalls(client))
        assert not any(s.request.text_open for s in engine.streams), "slow text must not be streamed"
    assert len(heard["auto"]) <= len(heard["off"]), heard

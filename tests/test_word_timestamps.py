"""Word timestamps on /v1/tts/ws (docs/protocol.md, Word timestamps): negotiated at session.start, exact on the
context's timeline, each event before the audio it describes, none after a cancel ack; and the SDK's view of them."""

from __future__ import annotations

import asyncio
import itertools
import json

import pytest
import websockets
from support import connect, errors_until_pong
from voxgate.engine.fake import FakeEngine
from voxgate.gateway.protocol import PROTOCOL, FrameHeader

TEXT = "The birch canoe slid on the smooth planks. Glue the sheet to the dark blue background."
WORD_MS = 370.0  # the fake engine's word


class NoWordTimes(FakeEngine):
    supports_word_times = False


async def speak(ws, context_id: str, *parts: str, **open_fields) -> list:
    """Speak a context; every message and frame until its context.done."""
    if open_fields:
        await ws.send(json.dumps({"type": "context.open", "context_id": context_id, **open_fields}))
    for part in parts:
        await ws.send(json.dumps({"type": "text.append", "context_id": context_id, "text": part}))
    await ws.send(json.dumps({"type": "context.end", "context_id": context_id}))
    log: list = []
    while True:
        raw = await asyncio.wait_for(ws.recv(), 20)
        log.append(raw if isinstance(raw, bytes) else json.loads(raw))
        if isinstance(raw, str) and log[-1]["type"] == "context.done" and log[-1]["context_id"] == context_id:
            return log


def words_in_order(log: list, rate: int = 24000) -> list[dict]:
    """The context's words; each event is checked to come before any frame that holds its words' audio."""
    start_pts = next(m["start_pts"] for m in log if isinstance(m, dict) and m["type"] == "context.started")
    received = start_pts  # the timeline position up to which audio has arrived
    words: list[dict] = []
    for item in log:
        if isinstance(item, bytes):
            header = FrameHeader.unpack(item)
            received = header.pts + header.samples
        elif item["type"] == "timestamps":
            for word in item["words"]:
                assert start_pts + word["start_ms"] * rate / 1000 >= received - 2, (word, received)
            words += item["words"]
    return words


def check_contiguous(words: list[dict], audio_ms: float) -> None:
    for before, after in itertools.pairwise(words):
        assert before["start_ms"] < before["end_ms"] == after["start_ms"]
    assert abs(words[-1]["end_ms"] - audio_ms) <= 1


async def test_session_started_says_whether_words_come(gateway, fake_engine):
    server = gateway(engine=fake_engine())
    ws, started = await connect(server.ws_url, timestamps="word")
    assert started["timestamps"] == "word" and "timestamps_unavailable" not in started
    assert started["timestamps_hold"] is True
    # The fake engine knows a word's time before its audio: asking not to hold changes nothing, and says so.
    ws3, started = await connect(server.ws_url, timestamps="word", timestamps_hold=False)
    assert started["timestamps"] == "word" and started["timestamps_hold"] is True
    await ws3.close()
    ws2, started = await connect(server.ws_url)
    assert started["timestamps"] == "none" and "timestamps_unavailable" not in started
    log = await speak(ws2, "a", "Hello there.")  # not asked: none sent
    assert not [m for m in log if isinstance(m, dict) and m["type"] == "timestamps"]
    async with websockets.connect(server.ws_url, subprotocols=[PROTOCOL]) as raw:
        await raw.send(json.dumps({"type": "session.start", "timestamps": "chars"}))
        error = json.loads(await raw.recv())
        assert (error["code"], error["param"]) == ("invalid_message", "timestamps")
    async with websockets.connect(server.ws_url, subprotocols=[PROTOCOL]) as raw:
        await raw.send(json.dumps({"type": "session.start", "timestamps": "word", "timestamps_hold": "no"}))
        error = json.loads(await raw.recv())
        assert (error["code"], error["param"]) == ("invalid_message", "timestamps_hold")
    other = gateway(engine=NoWordTimes())
    _, started = await connect(other.ws_url, timestamps="word")
    assert started["timestamps"] == "none"
    assert "does not measure word times" in started["timestamps_unavailable"]
    await ws.close()
    await ws2.close()


@pytest.mark.parametrize("streaming", [True, False])
async def test_fake_words_are_exact_on_the_context_timeline(gateway, fake_engine, streaming):
    # Text streaming (one engine stream for the turn) and sentence mode (one per sentence) place them alike.
    server = gateway(engine=fake_engine(text_streaming=streaming, chunk_ms=100))
    ws, _ = await connect(server.ws_url, timestamps="word", pacing={"mode": "asap"})
    for context_id in ("t1", "t2"):  # the second context's times count from its own first sample
        log = await speak(ws, context_id, TEXT[:30], TEXT[30:])
        words = words_in_order(log)
        assert [w["word"] for w in words] == TEXT.split()
        assert [(w["start_ms"], w["end_ms"]) for w in words] == [
            (round(i * WORD_MS, 1), round((i + 1) * WORD_MS, 1)) for i in range(len(words))]
        check_contiguous(words, log[-1]["usage"]["audio_ms"])
        assert all(m["context_id"] == context_id for m in log if isinstance(m, dict) and m["type"] == "timestamps")
    # A length budget: words it cuts off are not sent, the one it cuts ends with the audio.
    log = await speak(ws, "t3", TEXT, max_audio_ms=1000)
    assert [(w["word"], w["start_ms"], w["end_ms"]) for w in words_in_order(log)] == [
        ("The", 0.0, 370.0), ("birch", 370.0, 740.0), ("canoe", 740.0, 1000.0)]
    await ws.close()


async def test_espeak_words_over_the_wire_at_another_rate(gateway):
    server = gateway()  # espeak, sentence mode: one engine stream per sentence, one timeline
    ws, _ = await connect(server.ws_url, timestamps="word", pacing={"mode": "asap"}, audio={"sample_rate": 16000})
    log = await speak(ws, "e1", TEXT)
    words = words_in_order(log, rate=16000)
    assert " ".join(w["word"] for w in words) == TEXT
    assert words[0]["start_ms"] == 0.0
    check_contiguous(words, log[-1]["usage"]["audio_ms"])
    await ws.close()


async def test_no_timestamps_after_the_cancel_ack(gateway, fake_engine):
    server = gateway(engine=fake_engine(chunk_ms=40))
    ws, _ = await connect(server.ws_url, timestamps="word", pacing={"mode": "realtime"})
    await ws.send(json.dumps({"type": "text.append", "context_id": "c", "text": "word " * 80}))
    await ws.send(json.dumps({"type": "context.end", "context_id": "c"}))
    seen = 0
    while seen < 3:  # a few words in: the rest is still being paced out
        raw = await asyncio.wait_for(ws.recv(), 10)
        seen += isinstance(raw, str) and json.loads(raw)["type"] == "timestamps"
    await ws.send(json.dumps({"type": "context.cancel", "context_id": "c"}))
    after_ack: list = []
    acked = False
    await ws.send(json.dumps({"type": "ping"}))
    while True:
        raw = await asyncio.wait_for(ws.recv(), 10)
        message = None if isinstance(raw, bytes) else json.loads(raw)
        if message is not None and message["type"] == "pong":
            break
        acked = acked or (message is not None and message["type"] == "context.cancelled")
        if acked:
            after_ack.append(message)
    assert acked and not [m for m in after_ack if m is not None and m["type"] == "timestamps"]
    assert not await errors_until_pong(ws)
    await ws.close()


async def test_the_sdk_gives_each_turn_its_words_before_their_audio(gateway, fake_engine):
    import voxgate.client

    server = gateway(engine=fake_engine(chunk_ms=100))
    async with voxgate.client.connect(server.ws_url, timestamps="word", sample_rate=16000) as tts:
        assert tts.session["timestamps"] == "word"
        await tts.speak("A first turn.").audio()  # the second turn's timeline starts after it
        turn = tts.speak(TEXT)
        followed = asyncio.get_running_loop().create_task(_collect(turn.timestamps()))
        async for chunk in turn:  # every word that starts in a chunk is known when the chunk arrives
            assert len(turn.words) >= sum(w.start_pts < chunk.end_pts for w in _expected(tts, turn, 16000))
        words = await followed
        assert words == turn.words == _expected(tts, turn, 16000)
        assert tts.client.context(turn.context_id).words == [
            {"word": w.word, "start_ms": w.start_ms, "end_ms": w.end_ms} for w in words]
        cut = tts.speak(TEXT)  # a cancelled turn's iterator ends with it
        async for _chunk in cut:
            break
        await cut.cancel()
        assert [w.word for w in await _collect(cut.timestamps())] == TEXT.split()[: len(cut.words)]
    speech = await voxgate.client.speak(server.ws_url, "Two words.", timestamps="word")
    assert [(w.word, w.start_ms, w.end_ms) for w in speech.words] == [("Two", 0.0, 370.0), ("words.", 370.0, 740.0)]


async def _collect(words) -> list:
    return [w async for w in words]


def _expected(tts, turn, rate: int) -> list:
    """The fake engine's words of TEXT in `turn` (word i: i * 370 ms), on the track's timeline too."""
    import voxgate.client

    start = tts.client.context(turn.context_id).event("context.started")["start_pts"]
    ms = [round(i * WORD_MS, 1) for i in range(len(TEXT.split()) + 1)]
    pts = [start + round(m * rate / 1000) for m in ms]
    return [voxgate.client.Word(word, ms[i], ms[i + 1], pts[i], pts[i + 1]) for i, word in enumerate(TEXT.split())]

"""A streamed turn longer than one engine stream (issue 23, finding 2), at real positions on a tiny checkpoint on
the CPU: the turn rolls over onto fresh streams and is spoken whole; a sentence longer than a whole stream ends its
context with an error; neither holds an engine slot afterwards, and other sessions keep speaking."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support import RecordingEngine, connect, cpu_loop_config, running_gateway, slots_free
from voxgate.engine.qwen3tts.engine import create_engine
from voxgate.gateway.transport.uvicorn_server import BackgroundServer

# 100 positions hold ~19 words after the prompt (0.37 s a word at 12.5 frames/s); two engine streams at once.
SMALL = dict(device="cpu", dtype="fp32", greedy="true", row_buckets="1,2", prefill_buckets="32", max_slots="3",
             max_positions="100", max_rows="2", chunk_frames="2,4,8", budget_factor="1", min_budget_s="0.4")
SENTENCES = [f"Sentence number {n} says a few more words." for n in range(1, 9)]  # 8 words each: 2 a stream
WORD_GAP_S = 0.01  # an LLM's pace (100 words/s): the rate rule streams it


@pytest.fixture(scope="module")
def server(tiny_ckpt: Callable[[str], Path]) -> Iterator[BackgroundServer]:
    engine = RecordingEngine(create_engine(model=str(tiny_ckpt("cv06")), **SMALL))
    # More turns than slots wait for one (admission by queue): what is tested is that rolled-over streams free theirs
    # (by deadline the extra turns would be refused at once: tests/qwen3tts/test_admission.py).
    with running_gateway(engine, cpu_loop_config()) as srv:
        yield srv


def _engine(server: BackgroundServer) -> RecordingEngine:
    return server.server.config.app.state.voxgate.engine


async def _turn(server: BackgroundServer, text: str, context_id: str,
                heard: asyncio.Event | None = None) -> tuple[int, list[dict], dict]:
    """`text` streamed word by word, then context.end: (audio samples, errors, context.done). `heard`: set at the
    first audio frame."""
    ws, _ = await connect(server.ws_url, pacing={"mode": "asap"}, defaults={"voice": "ryan"})
    try:
        for word in text.split(" "):
            await ws.send(json.dumps({"type": "text.append", "context_id": context_id, "text": word + " "}))
            await asyncio.sleep(WORD_GAP_S)
        await ws.send(json.dumps({"type": "context.end", "context_id": context_id}))
        samples, errors = 0, []
        while True:
            raw = await asyncio.wait_for(ws.recv(), 120)  # generous: 2 shared cores; the old code never answered
            if isinstance(raw, bytes):
                samples += (len(raw) - 24) // 2
                if heard is not None:
                    heard.set()
                continue
            message = json.loads(raw)
            if message["type"] == "error":
                errors.append(message)
            elif message["type"] == "context.done":
                return samples, errors, message
    finally:
        await ws.close()


async def _all_slots_free(server: BackgroundServer) -> None:
    await slots_free(_engine(server).inner)  # every slot comes back


def _streamed_text(server: BackgroundServer, since: int) -> list[str]:
    """The text each engine stream opened since `since` was given (its request's, then every append)."""
    engine = _engine(server)
    return [stream.request.text + "".join(stream.appended) for stream in engine.streams[since:]]


@pytest.mark.slow
async def test_a_turn_longer_than_a_stream_rolls_over_and_is_spoken_whole(server: BackgroundServer) -> None:
    engine = _engine(server)
    before = len(engine.streams)
    text = " ".join(SENTENCES)
    samples, errors, done = await _turn(server, text, "long")
    assert errors == [] and done["usage"]["chars"] == len(text) + 1
    streams = _streamed_text(server, before)
    assert len(streams) >= 3  # several times one stream's text
    assert " ".join(" ".join(streams).split()) == text  # every word went to an engine stream, in order, once
    for part in streams[:-1]:
        assert part.rstrip().endswith("words.")  # each full stream ended its text at a sentence end
    for _, chunks in engine.produced[before:]:
        assert chunks  # each stream spoke
    assert samples == sum(sum(len(c) for c in chunks) for _, chunks in engine.produced[before:])
    await _all_slots_free(server)


async def test_a_sentence_longer_than_a_stream_ends_the_context_with_an_error(server: BackgroundServer) -> None:
    endless = " ".join(f"word{n}" for n in range(60))  # no sentence end: ~3 streams' worth
    _, errors, done = await _turn(server, endless, "endless")
    assert [e["code"] for e in errors] == ["text_too_long"]
    assert "max_positions" in errors[0]["message"] and errors[0]["context_id"] == "endless"
    assert done["context_id"] == "endless"
    await _all_slots_free(server)


@pytest.mark.slow
async def test_other_sessions_speak_while_long_turns_roll_over(server: BackgroundServer) -> None:
    """Two long turns and an endless sentence at once, more than this server's two engine slots: a short turn of
    another session, started once the first long turn is heard, gets its audio meanwhile, and another one after
    them (on the old code the full streams kept their slots: neither got any)."""
    text = " ".join(SENTENCES[:4])
    endless = " ".join(f"word{n}" for n in range(40))
    heard = asyncio.Event()

    async def short_meanwhile() -> tuple[int, list[dict], dict]:
        await heard.wait()
        return await _turn(server, "A short turn.", "meanwhile")

    results = await asyncio.gather(_turn(server, text, "a", heard), _turn(server, text, "b"),
                                   _turn(server, endless, "c"), short_meanwhile())
    assert results[0][1] == [] and results[1][1] == [] and results[2][1][0]["code"] == "text_too_long"
    assert results[3][1] == [] and results[3][0] > 0
    samples, errors, _ = await _turn(server, "A short turn after them.", "after")
    assert errors == [] and samples > 0
    await _all_slots_free(server)

"""The embedded espeak-ng engine: voices, streaming, budget, cancel, and that it never blocks the event loop."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest
from voxgate.engine.base import EngineError, SynthesisRequest
from voxgate.engine.espeak import EspeakEngine, split_sentences

LONG = " ".join(["The quick brown fox jumps over the lazy dog, again and again."] * 12)


@pytest.fixture
async def engine():
    e = EspeakEngine()
    await e.start()
    return e


async def test_voices_and_default(engine):
    ids = {v.id for v in engine.voices()}
    assert {"en-us", "de", "fr-fr", "cmn"} <= ids and engine.default_voice() == "en-us"
    with pytest.raises(EngineError) as exc:
        engine.open_stream(SynthesisRequest("hi", voice="klingon"))
    assert exc.value.code == "voice_not_found"


async def test_streams_in_pieces_at_24k(engine):
    chunks = [c async for c in engine.open_stream(SynthesisRequest("One. Two. Three."))]
    assert len(chunks) > 3 and all(c.dtype == np.int16 and c.ndim == 1 for c in chunks)
    total = sum(len(c) for c in chunks)
    assert 1.0 * 24000 < total < 5 * 24000
    assert np.abs(np.concatenate(chunks)).max() > 1000  # real speech, not silence


@pytest.mark.parametrize("language", ["english", "chinese", "german", "italian", "portuguese", "spanish", "japanese",
                                      "korean", "french", "russian", "auto"])
def test_every_qwen_language_maps_to_an_espeak_voice(engine, language):
    engine.open_stream(SynthesisRequest("hi", language=language)).cancel()


async def test_budget_and_language_voice(engine):
    chunks = [c async for c in engine.open_stream(SynthesisRequest(LONG, language="german", max_audio_ms=700))]
    assert sum(len(c) for c in chunks) == 700 * 24


async def test_cancel_stops_at_once(engine):
    stream = engine.open_stream(SynthesisRequest(LONG))
    got = 0
    async for chunk in stream:
        got += len(chunk)
        stream.cancel()
    assert got < 24000 * 2  # the rest was never synthesized
    assert engine.queue_depth == 0


@pytest.mark.perf
async def test_synthesis_never_blocks_the_event_loop(engine):
    lags: list[float] = []

    async def ticker() -> None:
        while True:
            t = time.perf_counter()
            await asyncio.sleep(0.005)
            lags.append(time.perf_counter() - t - 0.005)

    task = asyncio.create_task(ticker())
    streams = [engine.open_stream(SynthesisRequest(LONG)) for _ in range(3)]

    async def drain(stream) -> int:
        return sum([len(c) async for c in stream])

    totals = await asyncio.gather(*(drain(s) for s in streams))
    task.cancel()
    assert min(totals) > 24000 * 20
    assert max(lags) < 0.05, f"event loop blocked for {max(lags) * 1000:.0f} ms"


def test_split_sentences():
    assert split_sentences("A b. C d! E\nF") == ["A b.", "C d!", "E", "F"]

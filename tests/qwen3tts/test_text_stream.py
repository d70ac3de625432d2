"""Text streamed into live streams (issue 18): fed piece by piece at any split and any timing, a stream makes the
audio of the same text given all at once in the streaming-text layout (greedy, fp32, CPU, tiny checkpoint)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from support import slots_free, until
from voxgate.engine.base import EngineError, SynthesisRequest
from voxgate.engine.qwen3tts.engine import create_engine
from voxgate.engine.qwen3tts.tools.wav import to_int16

TEXTS = ["The birch canoe slid on the smooth planks.", "Glue the sheet to the dark blue background, please.",
         "It's easy to tell the depth of a well; four hours of steady work faced us.",
         "Numbers like 42 and 7 too, then a question?"]
FRAMES = 20


async def _engine(path: Path, **kw: object) -> object:
    small = dict(row_buckets="1,2,4,8", prefill_buckets="32,64", max_slots=24, max_positions=512, max_rows=8,
                 max_frames=FRAMES, budget_factor=100, urgent_s=0, chunk_frames="3,5")
    engine = create_engine(model=str(path), device="cpu", dtype="fp32", greedy=True, **{**small, **kw})
    await engine.start()
    return engine


def _offline(engine: object, text: str) -> np.ndarray:
    tts = engine.tts
    inputs = tts.prompt_inputs(text, "ryan", "english", non_streaming=False)
    return to_int16(tts.decode(tts.generate_codes(tts.build(inputs), tts.cfg.generation.greedy(), FRAMES)))


def _pieces(text: str, rng: random.Random) -> list[str]:
    cuts = sorted(rng.sample(range(1, len(text)), k=rng.randint(1, 14)))
    return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]


async def _speak(engine: object, pieces: list[str], rng: random.Random) -> np.ndarray:
    stream = engine.open_stream(SynthesisRequest(text=pieces[0], voice="ryan", language="en", text_open=True))

    async def feed() -> None:
        for piece in pieces[1:]:
            await asyncio.sleep(rng.choice([0, 0, 0.002, 0.01, 0.03]))
            stream.append_text(piece)
        await asyncio.sleep(rng.choice([0, 0.02]))
        stream.end_text()

    feeding = asyncio.create_task(feed())
    chunks = [c async for c in stream]
    await feeding
    return np.concatenate(chunks)


@pytest.mark.slow
async def test_any_split_and_timing_gives_the_whole_texts_audio(tiny_ckpt: Callable[[str], Path]) -> None:
    """20 streams at once (4 texts x 5 splits), fed with random pauses: each equals its text's offline decode in
    the streaming-text layout within 1 LSB (prefix decodes round like the whole)."""
    engine = await _engine(tiny_ckpt("cv17"))
    try:
        rng = random.Random(7)
        jobs = [(text, _pieces(text, rng)) for text in TEXTS for _ in range(5)]
        audio = await asyncio.gather(*(_speak(engine, pieces, random.Random(i)) for i, (_, pieces) in
                                       enumerate(jobs)))
        offline = {text: _offline(engine, text) for text in TEXTS}
        for (text, pieces), got in zip(jobs, audio, strict=True):
            want = offline[text]
            assert got.shape == want.shape, (pieces, got.shape, want.shape)
            assert np.abs(got.astype(np.int32) - want).max() <= 1, pieces
        assert engine.runner.kv.num_free == engine.runner.kv.max_streams  # every slot came back
    finally:
        await engine.stop()


@pytest.mark.slow
async def test_a_stream_waits_for_text_and_cancels_cleanly(tiny_ckpt: Callable[[str], Path]) -> None:
    engine = await _engine(tiny_ckpt("cv17"), text_min_tokens=2)
    try:
        stream = engine.open_stream(SynthesisRequest(text="Hello there my", voice="ryan", text_open=True))
        got: list[np.ndarray] = []

        async def listen() -> None:
            async for chunk in stream:
                got.append(chunk)

        task = asyncio.create_task(listen())
        # two committed tokens ("Hello", " there"): the stream runs them all, then waits for text
        await until(lambda: (r := stream.engine_request) is not None and r.num_launched == r.frames_ready)
        request = stream.engine_request
        assert request is not None and request.frames_ready == len(request.prompt.trailing)
        assert request.num_launched <= request.frames_ready
        steps = engine.loop.steps
        await asyncio.sleep(0.3)
        assert engine.loop.steps - steps <= 2  # waiting for text, the loop sleeps instead of stepping
        stream.cancel()
        await asyncio.wait_for(task, 5)
        with pytest.raises(EngineError):
            stream.end_text()
            stream.append_text(" more")
        await slots_free(engine)
    finally:
        await engine.stop()


@pytest.mark.slow
async def test_empty_streamed_text_ends_without_audio(tiny_ckpt: Callable[[str], Path]) -> None:
    engine = await _engine(tiny_ckpt("cv17"))
    try:
        stream = engine.open_stream(SynthesisRequest(text="", voice="ryan", text_open=True))
        stream.append_text("")
        stream.end_text()
        assert [c async for c in stream] == []
        with pytest.raises(EngineError, match="voice"):
            engine.open_stream(SynthesisRequest(text="Hi", voice="nobody", text_open=True))
    finally:
        await engine.stop()


@pytest.mark.slow
async def test_a_full_stream_refuses_more_text_changing_nothing_and_still_speaks(
        tiny_ckpt: Callable[[str], Path]) -> None:
    """At its slot's positions a stream says it cannot take more (`can_append_text`), refuses it with
    text_too_long naming the limit, and is as it was: its text ends and its audio comes (issue 23)."""
    engine = await _engine(tiny_ckpt("cv17"), max_positions=64)
    try:
        stream = engine.open_stream(SynthesisRequest(text="Words", voice="ryan", text_open=True))
        taken = 0
        while stream.can_append_text(" word"):
            stream.append_text(" word")
            taken += 1
        assert 5 <= taken <= 15  # ~64 positions less the prompt, 4.6 frames a word
        text = stream._feed.text
        with pytest.raises(EngineError, match="max_positions") as refused:
            stream.append_text(" word")
        assert refused.value.code == "text_too_long" and stream._feed.text == text
        assert stream.can_append_text("")
        stream.end_text()
        assert not stream.can_append_text(" word")  # ended
        assert len(np.concatenate([c async for c in stream])) > 0
        await slots_free(engine)  # the slot comes back with the loop's next step
    finally:
        await engine.stop()

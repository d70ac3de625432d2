"""The Engine adapter on the batched loop: streams int16 chunks equal to the offline decode, off the event loop,
cancels at once, and frees its slots."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from support import slots_free
from voxgate.engine.base import EngineError, SynthesisRequest
from voxgate.engine.qwen3tts.engine import create_engine
from voxgate.engine.qwen3tts.tools.wav import to_int16


async def _engine(path: Path, **kw: object) -> object:
    small = dict(row_buckets="1,2,4,8", prefill_buckets="32,64", max_slots=9, max_positions=512, max_rows=8)
    engine = create_engine(model=str(path), device="cpu", dtype="fp32", greedy=True, **{**small, **kw})
    await engine.start()
    return engine


@pytest.mark.slow
async def test_stream_equals_offline_synthesis(tiny_ckpt: Callable[[str], Path]) -> None:
    # urgent_s=0: chunks exactly as scheduled (on a slow CPU the listener model would ask for early chunks)
    engine = await _engine(tiny_ckpt("cv17"), max_frames=30, chunk_frames=7, budget_factor=100, urgent_s=0)
    try:
        assert engine.ready and [v.id for v in engine.voices()][:2] == ["serena", "vivian"]
        stream = engine.open_stream(SynthesisRequest(text="Hello there.", voice="ryan", language="en"))
        chunks = [c async for c in stream]
        assert all(c.dtype == np.int16 and c.ndim == 1 for c in chunks)
        assert [len(c) for c in chunks] == [7 * 1920] * 4 + [2 * 1920]
        tts = engine.tts
        inputs = tts.prompt_inputs("Hello there.", "ryan", "english")
        offline = tts.decode(tts.generate_codes(tts.build(inputs), tts.cfg.generation.greedy(), 30))
        # Prefix decodes (context covers the whole utterance) equal the whole decode up to fp32 rounding.
        assert np.abs(np.concatenate(chunks).astype(np.int32) - to_int16(offline)).max() <= 1
    finally:
        await engine.stop()


@pytest.mark.slow
async def test_max_audio_ms_is_a_frame_budget(tiny_ckpt: Callable[[str], Path]) -> None:
    engine = await _engine(tiny_ckpt("cv06"), max_frames=50)
    try:
        stream = engine.open_stream(SynthesisRequest(text="Budget.", voice="aiden", max_audio_ms=400))
        assert sum([len(c) async for c in stream]) == 5 * 1920
    finally:
        await engine.stop()


@pytest.mark.slow
async def test_cancel_stops_at_once_and_loop_stays_free(tiny_ckpt: Callable[[str], Path]) -> None:
    engine = await _engine(tiny_ckpt("cv17"), max_frames=100_000, chunk_frames=2)
    try:
        stream = engine.open_stream(SynthesisRequest(text="A very long utterance.", voice="ryan"))
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.005)
                ticks += 1

        task = asyncio.create_task(ticker())
        got = 0
        async for _chunk in stream:
            got += 1
            if got == 2:
                stream.cancel()
        task.cancel()
        assert got == 2 and ticks > 0  # the loop kept running while the worker generated
        start = time.perf_counter()
        # The worker is free again almost at once: the next request gets audio quickly.
        nxt = engine.open_stream(SynthesisRequest(text="Next.", voice="ryan", max_audio_ms=160))
        assert sum([len(c) async for c in nxt]) == 2 * 1920
        assert time.perf_counter() - start < 10
        await slots_free(engine)  # the cancelled request's slot (KV and codec state) is freed at a step boundary
    finally:
        await engine.stop()


@pytest.mark.slow
async def test_errors(tiny_ckpt: Callable[[str], Path]) -> None:
    engine = await _engine(tiny_ckpt("vd17"), max_frames=4)
    try:
        assert [v.id for v in engine.voices()] == ["design"]
        with pytest.raises(EngineError, match="not found"):
            engine.open_stream(SynthesisRequest(text="x", voice="ryan"))
        with pytest.raises(EngineError, match="not supported"):
            engine.open_stream(SynthesisRequest(text="x", language="klingon"))
        with pytest.raises(EngineError, match="instruct"):
            engine.open_stream(SynthesisRequest(text="x"))
        chunks = [c async for c in engine.open_stream(SynthesisRequest(text="x", instruct="A bright voice."))]
        assert sum(map(len, chunks)) == 4 * 1920
    finally:
        await engine.stop()


def test_registry_creates_it(tiny_ckpt: Callable[[str], Path]) -> None:
    from voxgate.engine.registry import create_engine as by_name

    engine = by_name("qwen3tts", model=str(tiny_ckpt("cv06")), device="cpu")
    assert engine.name == "qwen3tts" and not engine.ready
    assert torch.cuda.is_available() or engine.device == "cpu"


@pytest.mark.slow
async def test_stop_ends_open_streams_with_an_error(tiny_ckpt: Callable[[str], Path]) -> None:
    """A stream cut by the engine's stop says so (engine_stopped), instead of ending as if it were complete."""
    engine = await _engine(tiny_ckpt("cv06"), max_frames=100_000, chunk_frames=1)
    stream = engine.open_stream(SynthesisRequest(text="Endless.", voice="ryan"))
    got = 0
    with pytest.raises(EngineError) as err:
        async for _chunk in stream:
            got += 1
            if got == 1:
                await engine.stop()
    assert err.value.code == "engine_stopped" and not engine.ready
    with pytest.raises(EngineError, match="loading"):
        engine.open_stream(SynthesisRequest(text="After.", voice="ryan"))


@pytest.mark.slow
async def test_text_over_the_position_limit_is_refused(tiny_ckpt: Callable[[str], Path]) -> None:
    engine = await _engine(tiny_ckpt("cv06"), max_positions=64, warmup=False)
    try:
        with pytest.raises(EngineError, match="max_positions") as err:
            engine.open_stream(SynthesisRequest(text="word " * 200, voice="ryan"))
        assert err.value.code == "text_too_long"
        # a text that fits at 1x but not at the budget factor gets the room its slot has
        stream = engine.open_stream(SynthesisRequest(text="word " * 6, voice="ryan"))
        assert stream.engine_request.frame_budget == 64 - stream.engine_request.num_prompt_tokens
        stream.cancel()
    finally:
        await engine.stop()


def test_unknown_option_lists_the_valid_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown qwen3tts engine option.*chunkframes.*valid options: model"):
        create_engine(model="x", chunkframes="4")


@pytest.mark.parametrize("options,message", [
    ({"codec_buckets": "1x"}, "ROWSxFRAMES"), ({"codec_buckets": "8x4,0x4"}, "ROWSxFRAMES"),
    ({"codec_buckets": "eight"}, "ROWSxFRAMES"), ({"codec_width": "0"}, "codec_width must be 1 to 32"),
    ({"codec_width": "64"}, "codec_width must be 1 to 32")])
def test_codec_call_options_refuse_bad_values_clearly(options: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        create_engine(model="x", **options)


def test_codec_call_options_set_the_captured_calls() -> None:
    assert create_engine(model="x", codec_buckets="1x1,16x2").loop_options["codec_buckets"] == ((1, 1), (16, 2))
    engine = create_engine(model="x", codec_width="8", pipeline="false")
    assert engine.loop_options["codec_width"] == 8 and engine.loop_options["codec_buckets"] is None
    assert engine.pipeline is False


def test_the_qwen3tts_preset_is_a_valid_engine_configuration() -> None:
    """configs/qwen3tts.toml: every engine option it sets is one the engine takes, with a sane value."""
    from voxgate.gateway.config import load_config

    config = load_config("qwen3tts")
    assert config.engine == "qwen3tts"
    engine = create_engine(**config.engine_options)
    assert engine.chunk_schedule == (1, 2, 4, 8, 16) and engine.scheduler_config.max_rows == 128
    assert engine.loop_options["max_positions"] == 2560 and engine.loop_options["max_slots"] is None  # auto


@pytest.mark.slow
async def test_instruct_capability_follows_the_checkpoint(tiny_ckpt: Callable[[str], Path]) -> None:
    for kind, expected in (("cv06", False), ("vd17", True)):
        engine = await _engine(tiny_ckpt(kind), warmup=False)
        try:
            assert engine.supports_instruct is expected
        finally:
            await engine.stop()


@pytest.mark.slow
@pytest.mark.parametrize("kind,has_encoder", [("cv17", False), ("base17", True)])
async def test_the_codec_encoder_is_loaded_for_base_checkpoints_only(tiny_ckpt: Callable[[str], Path], kind: str,
                                                                     has_encoder: bool) -> None:
    """It serves voice uploads, which only Base takes; elsewhere it is never loaded (225 MB in fp32 at real size)."""
    engine = await _engine(tiny_ckpt(kind), warmup=False)
    try:
        assert (engine.tts.codec_encoder is not None) == has_encoder
        assert engine.supports_voice_upload == has_encoder
    finally:
        await engine.stop()

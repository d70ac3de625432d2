"""The admission forecast (engine/admission.py) on synthetic step timings against a plain reference computation, the
batched loop feeding it (what it holds, its inbox), and the fake engine's forecast from its device."""

from __future__ import annotations

import asyncio
import random

import pytest
from engine_core_support import FakeRunner, Pool
from voxgate.engine.admission import FRAME_RATE, Held, LoopForecaster
from voxgate.engine.base import SynthesisRequest
from voxgate.engine.core import EngineCore
from voxgate.engine.fake import FakeEngine
from voxgate.engine.loop import EngineLoop
from voxgate.engine.request import Request
from voxgate.engine.scheduler import SchedulerConfig

BUCKETS = (1, 2, 4, 8, 16, 32, 64, 96, 128)


def reference(steps: list[tuple[int, float]], held: Held, queued: int, alpha: float, max_prefills: int,
              first_chunk: int, slots: int, codec_s: float, min_rows: int) -> tuple[float, float, int, int]:
    """(first audio s, load, streams, free slots), computed the long way round."""
    periods: dict[int, float] = {}
    for rows, seconds in steps:
        key = 0 if rows == 0 else min(b for b in BUCKETS if b >= rows)
        periods[key] = seconds if key not in periods else (1 - alpha) * periods[key] + alpha * seconds
    n = held.generating + queued + 1
    rows = min(n, max(BUCKETS))
    want = min(b for b in BUCKETS if b >= rows)
    measured = sorted(periods)
    at_or_above = [k for k in measured if k >= want]
    period = periods[at_or_above[0]] if at_or_above else periods[measured[-1]]
    read_late = 1 if rows >= min_rows else 0  # a pipelined step's frame is read with the next step
    prefill_steps = (held.prefilling + queued) // max_prefills + 1  # those ahead, then its own
    frame_steps = first_chunk - 1  # its prompt's step makes its first frame; one step each for the rest
    codec_steps = 1  # its first codec piece
    steps_to_audio = prefill_steps + frame_steps + codec_steps + read_late
    return (steps_to_audio * period + codec_s, n * period * FRAME_RATE / rows, n,
            slots - held.holding - queued)


@pytest.mark.parametrize("seed", range(20))
def test_forecast_matches_the_reference_on_random_step_timings(seed: int) -> None:
    rng = random.Random(seed)
    alpha, max_prefills, first_chunk, slots = rng.choice([0.05, 0.2, 1.0]), rng.randint(1, 8), rng.randint(1, 4), 300
    min_rows = rng.choice([0, 4, 64])
    model = LoopForecaster(BUCKETS, max_prefills, first_chunk, slots, pipelined=True, alpha=alpha,
                           pipeline_min_rows=min_rows)
    steps = [(rng.choice([0, rng.randint(1, 128)]), rng.uniform(0.002, 0.05)) for _ in range(rng.randint(1, 200))]
    codec = 0.0
    for rows, seconds in steps:
        codec_step = rng.uniform(0, 0.004)
        codec += alpha * (codec_step - codec)
        model.observe(rows, seconds, codec_step, rng.randint(0, 2), 0.0)
    generating = rng.randint(0, 250)
    held = Held(generating, rng.randint(0, generating), generating + rng.randint(0, 20))
    model.publish(held)
    queued = rng.randint(0, 30)
    got = model.forecast(queued)
    first, load, n, free = reference(steps, held, queued, alpha, max_prefills, first_chunk, slots, codec, min_rows)
    assert got.first_audio_s == pytest.approx(first) and got.load == pytest.approx(load)
    assert (got.streams, got.free_slots, got.total_slots) == (n, free, slots)


def test_a_cold_loop_admits_up_to_its_slots() -> None:
    model = LoopForecaster(BUCKETS, 4, 1, total_slots=3)
    model.publish(Held(2, 0, 2))
    cold = model.forecast()
    assert (cold.first_audio_s, cold.load, cold.streams, cold.free_slots) == (0.0, 0.0, 3, 1)
    assert model.forecast(queued=1).free_slots == 0


def test_streams_beyond_the_rows_share_them() -> None:
    """128 rows at 13 ms make 9,846 frames/s: 787 streams at 1x. Below the rows the load is the step's share of a
    frame's 80 ms; above, it grows with the streams."""
    model = LoopForecaster(BUCKETS, 4, 1, total_slots=None, alpha=1.0)
    model.observe(128, 0.013, 0.0, 0, 0.0)
    model.publish(Held(127, 0, 127))
    assert model.forecast().load == pytest.approx(0.013 / 0.08)
    model.publish(Held(786, 0, 786))
    assert model.forecast().load == pytest.approx(787 * 0.013 / 0.08 / 128)
    assert model.forecast(queued=10).load > 1


def test_ends_measure_how_soon_room_comes_back() -> None:
    model = LoopForecaster(BUCKETS, 4, 1, total_slots=None)
    assert model.forecast().end_interval_s == 1.0  # nothing ended yet: a default
    for k in range(400):  # one end every 50 ms, long enough for the decayed rate to settle
        model.observe(8, 0.01, 0.0, 1 if k % 5 == 0 else 0, k * 0.01)
    assert model.forecast().end_interval_s == pytest.approx(0.05, rel=0.2)  # (between two ends it decays)


async def test_the_loop_feeds_its_forecaster() -> None:
    pool = Pool(6)
    core = EngineCore(FakeRunner(), pool, SchedulerConfig(max_rows=16, max_prefills=2, max_prefill_tokens=64))
    model = LoopForecaster((1, 2, 4, 8, 16), 2, 1, total_slots=6)
    loop = EngineLoop(core, forecaster=model, gil_switch_s=None)
    loop.start()
    try:
        streams = [loop.submit(SynthesisRequest(text="x"), Request(None, 10, 6, (1, 2, 4))) for _ in range(3)]
        for stream in streams:
            async for _ in stream:
                pass
        # every stream ended: nothing held, nothing in the inbox; the steps' periods were measured
        await asyncio.wait_for(_until(lambda: model.held == Held(0, 0, 0) and loop.forecast().streams == 1), 10)
        assert model.period and all(p > 0 for p in model.period.values())
        assert loop.forecast(queued=2).free_slots == 4
    finally:
        await loop.stop()


async def _until(predicate) -> None:
    while not predicate():
        await asyncio.sleep(0.005)


async def test_the_fake_engine_counts_its_open_streams_against_its_device() -> None:
    assert FakeEngine().admission_forecast() is None  # no opinion unless asked (tests overload it on purpose)
    engine = FakeEngine(device_rtf=4, first_chunk_ms=0, forecast=True)
    await engine.start()
    assert engine.admission_forecast().load == pytest.approx(0.25)
    streams = [engine.open_stream(SynthesisRequest(text="one two three")) for _ in range(3)]
    forecast = engine.admission_forecast(queued=1)
    assert forecast.streams == 5 and forecast.load == pytest.approx(1.25) and forecast.free_slots is None
    async for _ in streams[0]:  # one ends by itself, one is cancelled
        pass
    streams[1].cancel()
    streams[1].cancel()
    assert engine.admission_forecast().streams == 2
    unshared = FakeEngine(device_rtf=4, shared_device=False, forecast=True)
    assert unshared.admission_forecast(queued=100).load == pytest.approx(0.25)

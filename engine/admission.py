"""Admission forecasts: what one more stream would meet if an engine took it now.

An engine answers `Engine.admission_forecast()` with a `Forecast` (or None: no opinion); the gateway's admission
(gateway/session/admission.py) judges it against its first-audio SLO and margin. The batched loop's forecast
(`LoopForecaster`) is measured, not guessed: the loop feeds it after every step (decode rows, the step's period
including its codec work, streams that ended) and publishes how many streams it holds; the event loop asks in
O(row buckets) with plain Python numbers, no tensors and no locks (the worker replaces whole values, the event loop
reads them).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import NamedTuple

from .request import FRAME_S

FRAME_RATE = 1 / FRAME_S  # frames a stream needs per second to play at 1x (12.5)
DEFAULT_END_INTERVAL_S = 1.0  # how soon room comes back before any stream was seen to end


@dataclass(frozen=True, slots=True)
class Forecast:
    """One more stream, now.

    `first_audio_s`: from now to its first audio (0 while nothing is measured: a cold engine admits up to its slots).
    `load`: the frame rate all generating streams need at 1x, the new one included, over the rate the steps make
    with them (above 1, some stream falls behind its listener). `streams`: the streams counted in `load`.
    `free_slots` / `total_slots`: slots left for new streams before this one (those queued ahead already taken
    off), and all of them; None: no slot bound (engines that queue nothing, or unbounded). `end_interval_s`: the
    measured time between two streams' ends, how soon room comes back (for Retry-After)."""

    first_audio_s: float
    load: float
    streams: int
    free_slots: int | None = None
    total_slots: int | None = None
    end_interval_s: float = DEFAULT_END_INTERVAL_S


class Held(NamedTuple):
    """What the loop holds after a step (published by the worker, replaced whole)."""

    generating: int  # streams that need rows: waiting for a slot, prefilling or decoding (not ended)
    prefilling: int  # streams whose prompt is not all through the Talker yet (waiting ones included)
    holding: int  # streams holding a slot or waiting for one


class EndRate:
    """Streams ended per second, decayed with time constant `tau_s` (an exponential moving rate)."""

    def __init__(self, tau_s: float = 2.0) -> None:
        self.tau_s = tau_s
        self.rate = 0.0
        self._at: float | None = None

    def add(self, ended: int, now: float) -> None:
        if self._at is not None:
            self.rate *= math.exp(-max(0.0, now - self._at) / self.tau_s)
        self.rate += ended / self.tau_s
        self._at = now

    @property
    def interval_s(self) -> float:
        return 1 / self.rate if self.rate > 1 / (10 * self.tau_s) else DEFAULT_END_INTERVAL_S


class LoopForecaster:
    """A batched loop's step time per row bucket (EWMA of the measured period, codec included), its codec time, and
    the streams it holds; `forecast(queued)` predicts a new stream's first audio and the load with it.

    First audio: the prefills ahead of it (`max_prefills` ride each step), then `first_chunk` frames, one a step,
    the first made by the step that completes its prompt (a new stream's deadline is its arrival, so it gets a row
    even when streams outnumber rows), a step more when the step is pipelined (`pipeline_min_rows`) and one for its
    codec piece, all at the period of the row bucket it would run in, plus one codec call. Load: `n` generating
    streams need `n x 12.5` frames/s; a step makes `min(n, max_rows)` frames in its period."""

    def __init__(self, row_buckets: tuple[int, ...], max_prefills: int, first_chunk: int,
                 total_slots: int | None, pipelined: bool = True, alpha: float = 0.05,
                 pipeline_min_rows: int = 0) -> None:
        self.buckets = sorted(set(row_buckets))
        self.max_rows = self.buckets[-1]
        self.max_prefills = max_prefills
        self.first_chunk = first_chunk
        self.total_slots = total_slots
        self.pipelined = pipelined
        self.pipeline_min_rows = pipeline_min_rows  # steps with fewer decode rows are read at once (core.py)
        self.alpha = alpha
        self.period: dict[int, float] = {}  # row bucket (0: prefill only) -> EWMA seconds per step
        self.codec_s = 0.0
        self.ends = EndRate()
        self.held = Held(0, 0, 0)

    def lag_steps(self, rows: int) -> int:
        """Steps after a frame's own before its audio: the codec piece's, and one more where the frame is read a
        step late (pipelined steps of `pipeline_min_rows` rows or more)."""
        return 2 if self.pipelined and rows >= self.pipeline_min_rows else 1

    def bucket(self, rows: int) -> int:
        if rows <= 0:
            return 0
        return self.buckets[min(bisect.bisect_left(self.buckets, rows), len(self.buckets) - 1)]

    # -- worker side ------------------------------------------------------------------------------------------------
    def observe(self, rows: int, period_s: float, codec_s: float, ended: int, now: float) -> None:
        """One step: its decode rows, the seconds since the step before began (or its own time after a pause),
        its codec seconds, the streams that ended in it."""
        key = self.bucket(rows)
        old = self.period.get(key)
        self.period[key] = period_s if old is None else old + self.alpha * (period_s - old)
        self.codec_s += self.alpha * (codec_s - self.codec_s)
        self.ends.add(ended, now)

    def publish(self, held: Held) -> None:
        self.held = held

    # -- event-loop side --------------------------------------------------------------------------------------------
    def period_for(self, rows: int) -> float | None:
        """The step period at `rows` decode rows: its bucket's, else the next larger bucket measured (steps only
        grow with rows), else the largest smaller one (a bucket not run yet is learnt by running it); None cold."""
        want = self.bucket(rows)
        larger = [k for k in self.period if k >= want]
        if larger:
            return self.period[min(larger)]
        return self.period[max(self.period)] if self.period else None

    def forecast(self, queued: int = 0) -> Forecast:
        """`queued`: streams handed to the loop (or admitted for it) that it has not taken in yet; they come first."""
        held = self.held
        n = held.generating + queued + 1
        free = None if self.total_slots is None else self.total_slots - held.holding - queued
        interval = self.ends.interval_s
        rows = min(n, self.max_rows)
        period = self.period_for(rows)
        if period is None:
            return Forecast(0.0, 0.0, n, free, self.total_slots, interval)
        ahead = held.prefilling + queued
        steps = ahead // self.max_prefills + self.first_chunk + self.lag_steps(rows)
        load = n * FRAME_RATE * period / rows
        return Forecast(steps * period + self.codec_s, load, n, free, self.total_slots, interval)

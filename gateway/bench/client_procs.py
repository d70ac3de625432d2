"""An open-loop phase offered by several client processes (`voxgate bench --client-procs N`).

One Python event loop cannot offer a few hundred streamed requests a second: past that the load generator falls
behind its own schedule, and its loop lag shows in every number it reports (an HTTP overload at 200 req/s of 7 s
streams measured the client, lagging seconds, not the server). Each process takes every n-th arrival of the same
Poisson schedule from one shared start time (time.perf_counter() is CLOCK_MONOTONIC, one clock for the machine),
so the offered load is exactly the single-process one; their samples are merged into one phase.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from dataclasses import astuple
from typing import Any

from .loads import PhaseResult, Target, run_open
from .workload import Workload

START_DELAY_S = 8.0  # the processes start, import and open their session pools before the shared start


def run_open_procs(target: Target, workload: Workload, rate: float, warmup_s: float, duration_s: float,
                   seed: int, drain_s: float, pool: int, procs: int) -> PhaseResult:
    """`run_open` over `procs` processes (blocking: run it in a thread from async code)."""
    start_at = time.perf_counter() + START_DELAY_S
    fields = astuple(Target(target.base_url, target.transport, target.frame_ms, target.voice, target.deflate,
                            target.codec, target.text_wps, target.timestamps, target.timestamps_hold))
    jobs = [(fields, workload, rate, warmup_s, duration_s, seed, drain_s, -(-pool // procs), (j, procs), start_at)
            for j in range(procs)]
    with multiprocessing.get_context("spawn").Pool(procs) as workers:
        parts = workers.starmap(_part, jobs)
    return merge(parts)


def _part(fields: tuple[Any, ...], workload: Workload, rate: float, warmup_s: float, duration_s: float, seed: int,
          drain_s: float, pool: int, shard: tuple[int, int], start_at: float) -> PhaseResult:
    async def run() -> PhaseResult:
        target = Target(*fields)
        await target.open()
        try:
            return await run_open(target, workload, rate, warmup_s, duration_s, seed, drain_s, pool, shard, start_at)
        finally:
            await target.aclose()

    return asyncio.run(run())


def merge(parts: list[PhaseResult]) -> PhaseResult:
    """One phase from its shards: every sample (in schedule order), the audio of the window summed, the peaks in
    flight summed (an upper bound: the shards' peaks need not coincide), each loop-lag figure the worst shard's."""
    first = parts[0]
    merged = PhaseResult(dict(first.params), window_s=first.window_s)
    merged.params["client_procs"] = len(parts)
    merged.samples = sorted((s for p in parts for s in p.samples), key=lambda s: s["scheduled_s"])
    merged.window_audio_s = sum(p.window_audio_s for p in parts)
    merged.peak_in_flight = sum(p.peak_in_flight for p in parts)
    merged.loop_lag_ms = {key: max(p.loop_lag_ms.get(key, 0.0) for p in parts) for key in first.loop_lag_ms}
    return merged

"""kernels/depth_pass_clock.py: the per-phase table read from the one-launch pass's clock stamps, against a
straightforward loop over programs on random launches whose every duration is known (each program with its own
cycle counter's offset and rate, as SMs have)."""

from __future__ import annotations

import random
import statistics

import pytest
import torch
from voxgate.kernels.depth_pass_clock import PHASE_NAMES, markdown, phase_clock


def _launch(rng: random.Random, programs: int, layers: int, units: list[int]) -> tuple[torch.Tensor, dict]:
    """A made-up launch: stamps int64 [programs, layers, 5, 3, 2] and the durations that made them (ns)."""
    offsets = [rng.randrange(0, 10**12) for _ in range(programs)]
    rates = [rng.uniform(1.4, 2.0) for _ in range(programs)]
    times = torch.zeros(programs, layers, 5, 3, 2, dtype=torch.int64)
    truth = {"prologue": {}, "tiles": {}, "start": {}, "end": {}}
    release = float(rng.randrange(10**6, 10**7))
    for layer in range(layers):
        for phase in range(5):
            ends = []
            for pid in range(programs):
                start = release + rng.uniform(0, 400)
                work = pid < units[phase]
                prologue = rng.uniform(50, 3000) if work else rng.uniform(0, 50)
                tiles = rng.uniform(500, 9000) if work else rng.uniform(0, 30)
                stamps = (start, start + prologue, start + prologue + tiles)
                for point, ns in enumerate(stamps):
                    times[pid, layer, phase, point, 0] = round(ns)
                    times[pid, layer, phase, point, 1] = round(offsets[pid] + rates[pid] * round(ns))
                truth["prologue"][pid, layer, phase] = prologue
                truth["tiles"][pid, layer, phase] = tiles
                truth["start"][pid, layer, phase] = round(start)
                truth["end"][pid, layer, phase] = round(stamps[2])
                ends.append(stamps[2])
            release = max(ends) + rng.uniform(300, 2000)
    return times, truth


def _expected(truth: dict, programs: int, layers: int, units: list[int]) -> list[tuple[float, ...]]:
    rows = []
    order = [(layer, phase) for layer in range(layers) for phase in range(5)]
    for phase in range(5):
        working = range(min(units[phase], programs))
        prologue = tiles = tiles_max = span = release = 0.0
        for layer in range(layers):
            prologue += statistics.median_low(truth["prologue"][p, layer, phase] for p in working)
            tiles += statistics.median_low(truth["tiles"][p, layer, phase] for p in working)
            tiles_max += max(truth["tiles"][p, layer, phase] for p in working)
            end = max(truth["end"][p, layer, phase] for p in range(programs))
            span += end - min(truth["start"][p, layer, phase] for p in range(programs))
            at = order.index((layer, phase))
            if at + 1 < len(order):
                release += min(truth["start"][(p, *order[at + 1])] for p in range(programs)) - end
        rows.append(tuple(v / 1e3 for v in (prologue, tiles, tiles_max, span, release)))
    return rows


@pytest.mark.parametrize("seed", range(20))
def test_the_phase_table_is_the_loops_over_programs(seed: int) -> None:
    rng = random.Random(seed)
    programs, layers = rng.randrange(3, 12), rng.randrange(1, 4)
    units = [rng.randrange(1, programs + 3) for _ in range(5)]
    times, truth = _launch(rng, programs, layers, units)
    got = phase_clock(times, units)
    assert [c.name for c in got] == list(PHASE_NAMES)
    for clock, want in zip(got, _expected(truth, programs, layers, units), strict=True):
        values = (clock.prologue_us, clock.tiles_us, clock.tiles_max_us, clock.span_us, clock.release_us)
        assert values == pytest.approx(want, rel=2e-3, abs=2e-3), (clock.name, values, want)
    lines = markdown(got, "8 rows")
    total = sum(c.span_us + c.release_us for c in got)
    assert len(lines) == 2 + 5 + 1 and f"(total {total:.1f})" in lines[-1]

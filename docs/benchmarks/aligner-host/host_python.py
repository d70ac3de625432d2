"""The forced aligner's host work in one call of 56 clips, on the aligner's thread before and after its GPU work
(CPU, no model): the clips resampled to 16 kHz (to_16k's threads against one soxr call after another; soxr
releases the GIL), and the pieces that hold the GIL: the units of each text (split_units against its
character-by-character form split_units_ref), our words (text_words), the timestamp repair (trusted against its
numpy form trusted_ref, with the head's times in order and with outliers) and the word times. ms a call, the
median of RUNS.

    python docs/benchmarks/aligner-host/host_python.py [RUNS]

In the loop a call of ~56 clips took 139 ms on an H100 where alone it takes ~20 (docs/aligner.md#not-yet); the metric
voxgate_engine_aligner_part_seconds says how much of that is the host's. This prices the host's own work.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable

import numpy as np
import soxr
from voxgate.engine.aligner.align import INPUT_RATE, UnitTime, to_16k, word_times
from voxgate.engine.aligner.timestamps import trusted, trusted_ref
from voxgate.engine.aligner.units import split_units, split_units_ref
from voxgate.engine.words import text_words

CLIPS = 56
TEXT = "The birch canoe slid on the smooth planks, glue the sheet to the dark blue background."


def ms(fn: Callable[[], object], runs: int) -> float:
    fn()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main(runs: int) -> None:
    rng = np.random.default_rng(0)
    texts = [TEXT] * CLIPS
    units = [split_units(t) for t in texts]
    in_order = [(80.0 * np.cumsum(rng.integers(0, 6, 2 * len(u)))).tolist() for u in units]
    outliers = []
    for values in in_order:
        values = np.array(values)
        hit = rng.random(len(values)) < 0.2
        values[hit] = 80.0 * rng.integers(0, 500, int(hit.sum()))
        outliers.append(values.tolist())
    words = [text_words(t) for t in texts]
    timed = [[UnitTime(u, int(v[2 * i]), int(v[2 * i + 1])) for i, u in enumerate(us)]
             for us, v in zip(units, in_order, strict=True)]
    clips = [rng.standard_normal(int(INPUT_RATE * rng.uniform(0.5, 3.5))).astype(np.float32) * 0.1
             for _ in texts]
    rows = [
        ("clips to 16 kHz, to_16k / one soxr call after another", lambda: to_16k(clips),
         lambda: [soxr.resample(c, INPUT_RATE, 16_000) for c in clips]),
        ("units, split_units / split_units_ref", lambda: [split_units(t) for t in texts],
         lambda: [split_units_ref(t) for t in texts]),
        ("repair in order, trusted / trusted_ref", lambda: [trusted(v) for v in in_order],
         lambda: [trusted_ref(v) for v in in_order]),
        ("repair with outliers, trusted / trusted_ref", lambda: [trusted(v) for v in outliers],
         lambda: [trusted_ref(v) for v in outliers]),
        ("our words, text_words", lambda: [text_words(t) for t in texts], None),
        ("word times, word_times", lambda: [word_times(w, t, 48_000) for w, t in zip(words, timed, strict=True)], None),
    ]
    print(f"| {CLIPS} clips, ms a call | now | before |\n|---|---:|---:|")
    for name, now, before in rows:
        print(f"| {name} | {ms(now, runs):.2f} | {'' if before is None else f'{ms(before, runs):.2f}'} |")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 30)

"""Every garbage collection of a server run under `gc.set_debug(gc.DEBUG_STATS)` (gpu_loop.sh's ADM_SERVER_ENV),
from its log: passes per generation, their time (the collector's own, without the stats walk), and the sizes of
the generations and the unreachable objects of the longest ones.

    python3 gc_stats.py RESULTS/admission-server.log
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from pathlib import Path


def passes(lines: list[str]) -> list[tuple[int, tuple[int, ...], int, float]]:
    """(generation, sizes of generations 0-2 at the start, unreachable, seconds) per collection."""
    out, generation, sizes = [], None, ()
    for line in lines:
        if m := re.match(r"gc: collecting generation (\d)", line):
            generation = int(m.group(1))
        elif m := re.match(r"gc: objects in each generation: (\d+) (\d+) (\d+)", line):
            sizes = tuple(map(int, m.groups()))
        elif (m := re.match(r"gc: done, (\d+) unreachable, \d+ uncollectable, ([\d.]+)s elapsed", line)) \
                and generation is not None:
            out.append((generation, sizes, int(m.group(1)), float(m.group(2))))
    return out


def main(path: str) -> None:
    by: dict[int, list[tuple[float, tuple[int, ...], int]]] = defaultdict(list)
    for generation, sizes, unreachable, seconds in passes(Path(path).read_text().splitlines()):
        by[generation].append((seconds, sizes, unreachable))
    for generation in sorted(by):
        times = sorted(p[0] for p in by[generation])
        print(f"gen {generation}: {len(times)} passes, p50 {times[len(times) // 2] * 1e3:.2f} ms, "
              f"p99 {times[int(len(times) * 0.99)] * 1e3:.2f} ms, max {times[-1] * 1e3:.2f} ms")
        for seconds, sizes, unreachable in sorted(by[generation], key=lambda p: -p[0])[:5]:
            print(f"    {seconds * 1e3:6.1f} ms  generations {sizes}  unreachable {unreachable}")


if __name__ == "__main__":
    main(sys.argv[1])

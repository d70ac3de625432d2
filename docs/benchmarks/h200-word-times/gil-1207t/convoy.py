"""What taking the GIL back costs a thread that makes many short torch calls (as the engine loop's worker does), beside
threads running Python (the aligner's, the event loop), at CPython switch intervals from 5 to 0.05 ms; and what a
shorter interval costs threads that only run Python. CPU only, ~10 s:

    python docs/benchmarks/h200-word-times/gil-1207t/convoy.py

Every torch call lets go of the GIL; a thread that wants it back while another runs Python waits until that one
drops it, at the latest one switch interval later.
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
from collections.abc import Callable
from typing import TypeVar

import torch

T = TypeVar("T")

INTERVALS_MS = (5.0, 0.5, 0.2, 0.1, 0.05)


def spin(stop: threading.Event, counts: list[int]) -> None:
    """Pure Python, in rounds of 1,000 additions."""
    x = rounds = 0
    while not stop.is_set():
        for i in range(1000):
            x += i
        rounds += 1
    counts.append(rounds)


def with_spinners(busy: int, body: Callable[[], T]) -> tuple[T, list[int]]:
    stop, counts = threading.Event(), []
    threads = [threading.Thread(target=spin, args=(stop, counts), daemon=True) for _ in range(busy)]
    for thread in threads:
        thread.start()
    time.sleep(0.05)
    try:
        return body(), counts
    finally:
        stop.set()
        for thread in threads:
            thread.join()


def torch_calls(calls: int = 20, runs: int = 200) -> tuple[float, float]:
    """Median and worst ms of `calls` small torch additions in a row."""
    a, b = torch.zeros(16), torch.ones(16)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        for _ in range(calls):
            torch.add(a, b)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3, max(times) * 1e3


def main() -> None:
    torch.set_num_threads(1)
    saved = sys.getswitchinterval()
    print("20 small torch calls in a row (ms, median / worst of 200):")
    for busy in (0, 1, 2):
        cells = []
        for interval in INTERVALS_MS:
            sys.setswitchinterval(interval / 1000)
            (median, worst), _ = with_spinners(busy, torch_calls)
            cells.append(f"{interval:g} ms: {median:.3f} / {worst:.2f}")
        print(f"  beside {busy} busy Python threads: " + "; ".join(cells))
    print("3 busy Python threads for 1 s, rounds of 1,000 additions (all threads):")
    for interval in INTERVALS_MS[1:]:
        sys.setswitchinterval(interval / 1000)
        _, counts = with_spinners(3, lambda: time.sleep(1.0))
        print(f"  {interval:g} ms: {sum(counts)}")
    sys.setswitchinterval(saved)


if __name__ == "__main__":
    main()

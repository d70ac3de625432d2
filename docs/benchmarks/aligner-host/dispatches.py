"""The forced aligner's eager operations in one call of 56 clips, outside its graphs (CPU, the tiny synthetic
aligner, encoder and decoder through their bucketed graph paths, which on the CPU run eagerly and are not counted):
each is a dispatch under the GIL on the aligner's thread, beside the loop's; on CUDA most also launch a kernel or a
copy. Prints the count by operation, and the windows' layout (89 windows, rows of 104 frames) built as
WindowLayout.build does (numpy, one tensor at the end) and slice by slice into a torch tensor (as before c002e77),
alone and beside a busy Python thread with the switch interval the engine loop sets (0.5 ms): every torch operation
lets go of the GIL and waits to take it back, which costs little alone and much beside other Python threads.

    python docs/benchmarks/aligner-host/dispatches.py

Run from the repo root (it writes the tiny checkpoint with tests/aligner/checkpoint.py).
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import torch
from voxgate.engine.aligner.align import Aligner
from voxgate.engine.aligner.windows import PADDING, WindowLayout, pack
from voxgate.engine.graphs import GraphSet
from voxgate.engine.qwen3tts.bench.launch_count import LaunchCounter

sys.path.insert(0, "tests")
from aligner.checkpoint import write_sharp_aligner


def main() -> None:
    aligner = Aligner.from_pretrained(write_sharp_aligner(Path(tempfile.mkdtemp())), decoder="packed")
    aligner.capture(progress=False, encoder_graphs=True)
    counter = LaunchCounter(every_op=True)  # a graph set's call counts once, as "triton:graph set" (a replay on CUDA)
    GraphSet.__call__ = counter.kernel("graph set", GraphSet.__call__)  # type: ignore[method-assign]
    rng = np.random.default_rng(0)
    words = ["the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "while", "seven", "birds", "sing",
             "softly"]
    clips = [0.1 * rng.standard_normal(int(16_000 * rng.uniform(0.5, 3.5))).astype(np.float32) for _ in range(56)]
    texts = [" ".join(rng.choice(words, size=int(rng.integers(2, 9)))) for _ in clips]
    aligner.unit_times_batch(clips, texts)
    with counter:
        aligner.unit_times_batch(clips, texts)
    replays = counter.ops.pop("triton:graph set", 0)
    print(f"operations outside the graphs, a call of {len(clips)} clips: {sum(counter.ops.values())} "
          f"(and {replays} graph calls)")
    print(", ".join(f"{op} {n}" for op, n in counter.ops.most_common(8)))
    windows = [int(w) for w in rng.integers(7, 47, size=89)]
    print(f"windows' layout, 89 windows, alone: {layouts(windows)}")
    sys.setswitchinterval(0.0005)  # as EngineLoop.start sets it
    stop = threading.Event()
    threading.Thread(target=spin, args=(stop,), daemon=True).start()
    time.sleep(0.1)
    print(f"windows' layout, 89 windows, beside a busy Python thread: {layouts(windows)}")
    stop.set()


def slice_by_slice(windows: list[int], capacity: int) -> torch.Tensor:
    """window_of_slot as built before c002e77: a torch slice assignment a window."""
    packed = pack(windows, capacity)
    window_of_slot = torch.full((len(packed), capacity), PADDING, dtype=torch.int64)
    for r, members in enumerate(packed):
        column = 0
        for i in members:
            window_of_slot[r, column: column + windows[i]] = i
            column += windows[i]
    return window_of_slot


def layouts(windows: list[int], runs: int = 100) -> str:
    ms = []
    for build in (lambda: WindowLayout.build(windows, 104, rows=64), lambda: slice_by_slice(windows, 104)):
        t0 = time.perf_counter()
        for _ in range(runs):
            build()
        ms.append((time.perf_counter() - t0) / runs * 1e3)
    return f"numpy {ms[0]:.3f} ms, slice by slice in torch {ms[1]:.3f} ms"


def spin(stop: threading.Event) -> None:
    """Pure Python, as the event loop and the loop's worker are between their CUDA calls."""
    x = 0
    while not stop.is_set():
        for i in range(1000):
            x += i


if __name__ == "__main__":
    main()

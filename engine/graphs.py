"""Bucketed CUDA-graph capture, shared by the decode step and the codec.

A serving step runs on whatever rows are live, but a captured graph replays fixed shapes. So each user of this
module builds, per bucket, a step function over static buffers (`make(bucket)`), and `GraphSet` captures one graph
per bucket: largest first, all in one memory pool (a smaller graph's temporaries fit in the blocks the larger one
left), each after an eager warm-up on a side stream (kernels compile and tune, allocators settle, lazy
initialisation happens outside the capture). A call replays the bucket's graph and returns its static outputs:
views that the next replay of any graph in the set may overwrite, so use or copy them first.

Each set captures on a stream of its own. PyTorch's default capture stream is one per process, and cuBLAS keys its
workspace by stream, so graphs captured on it share one workspace address baked into their GEMMs: two sets replayed
at once on two streams (the codec beside the decode step) then corrupt each other's split-K partial sums. Eager
runs never showed it (each stream has its own workspace); the loop's teacher-forced GPU test did (codebook 1's
logits off by 1.3 relative where the codec call overlapped the depth loop).

`enforce_eager` (and every non-CUDA device) keeps the same buckets, buffers and padding but calls the step
functions directly: CPU tests exercise exactly the code the graphs were captured from.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import torch

K = TypeVar("K", bound=Hashable)
StepFn = Callable[[], Any]


@dataclass
class _Entry:
    fn: StepFn
    graph: torch.cuda.CUDAGraph | None = None
    out: Any = None


class GraphSet(Generic[K]):
    """One captured step per bucket key; `set(key)` replays it (or runs it eagerly) and returns its outputs."""

    def __init__(self, device: torch.device | str, enforce_eager: bool = False, warmup: int = 2,
                 capture_stream: torch.cuda.Stream | None = None) -> None:
        self.device = torch.device(device)
        self.use_graphs = self.device.type == "cuda" and not enforce_eager
        self.pool = torch.cuda.graph_pool_handle() if self.use_graphs else None
        # warm-ups and captures of this set run here: its own cuBLAS workspace (see the module docstring). A stream
        # of an SM-limited green context (engine/sm_stream.py) keeps the replays on its SMs: a graph captured on a
        # plain stream runs on all of them wherever it is replayed (measured, green-1207r/probe2.py).
        self.capture_stream = capture_stream
        if self.use_graphs and capture_stream is None:
            self.capture_stream = torch.cuda.Stream(device=self.device)
        self.warmup = warmup
        self.entries: dict[K, _Entry] = {}
        self.capture_s: dict[K, float] = {}

    def capture(self, buckets: Iterable[K], make: Callable[[K], StepFn], size: Callable[[K], float],
                desc: str = "capture", progress: bool = True) -> None:
        """Build and capture every bucket, largest `size` first, with a progress bar (compiling, tuning and
        capturing can take minutes on a cold start: say so instead of a silent wait)."""
        from tqdm import tqdm

        order = sorted(set(buckets), key=lambda b: (size(b), repr(b)), reverse=True)
        bar = tqdm(order, desc=desc, unit="graph", disable=not progress)
        for key in bar:
            bar.set_postfix_str(str(key))
            t0 = time.perf_counter()
            self.add(key, make(key))
            self.capture_s[key] = time.perf_counter() - t0

    def add(self, key: K, fn: StepFn) -> None:
        entry = self.entries[key] = _Entry(fn)
        if not self.use_graphs:
            return
        current = torch.cuda.current_stream(self.device)
        side = self.capture_stream
        assert side is not None
        side.wait_stream(current)
        with torch.cuda.stream(side):
            for _ in range(self.warmup):
                fn()
        current.wait_stream(side)
        entry.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(entry.graph, pool=self.pool, stream=side):
            entry.out = fn()

    def __call__(self, key: K) -> Any:
        entry = self.entries[key]
        if entry.graph is None:
            return entry.fn()
        entry.graph.replay()
        return entry.out

    def keys(self) -> list[K]:
        return list(self.entries)


def median_ms(fn: StepFn, reps: int, warmup: int = 3) -> float:
    """The median time of `fn` over `reps` runs after `warmup`: GPU time between CUDA events on CUDA, wall time on
    the CPU (a dry run)."""
    for _ in range(warmup):
        fn()
    times = []
    if not torch.cuda.is_available():
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1000)
        return statistics.median(times)
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def bucket_ladder(most: int, steps: int = 1, least: int = 1) -> tuple[int, ...]:
    """Bucket sizes from `least` to `most` (both powers of two), `steps` to an octave: 1 gives least, 2 least, 4 least
    ...; 2 adds 1.5x between them; 4 adds 1.25x, 1.5x and 1.75x. A call of n pads to at most n (1 + 1 / steps), so
    more steps mean less padding computed and more graphs to capture."""
    for name, value in (("most", most), ("least", least), ("steps", steps)):
        if value < 1 or value & (value - 1):
            raise ValueError(f"a bucket ladder's {name} must be a power of two, not {value}")
    if least > most:
        raise ValueError(f"a bucket ladder's least ({least}) is over its most ({most})")
    powers = (least << i for i in range((most // least).bit_length()))
    return tuple(sorted({p + i * p // steps for p in powers for i in range(steps) if p + i * p // steps <= most}))


def smallest_bucket(buckets: Iterable[int], n: int) -> int:
    """The smallest bucket >= n (ValueError when n is over the largest)."""
    fitting = [b for b in buckets if b >= n]
    if not fitting:
        raise ValueError(f"{n} is over the largest bucket ({max(buckets, default=0)})")
    return min(fitting)


# A blocking host-to-device copy waits for everything queued on the stream: pinned and non-blocking on CUDA, the host
# goes on queueing (a call's indices into a graph's static buffers, built on the host).
def upload(buffer: torch.Tensor, host: torch.Tensor) -> None:
    """Copy `host` into the (static) `buffer` without waiting for the stream's queued work."""
    buffer.copy_(host.pin_memory() if buffer.is_cuda else host, non_blocking=True)


def to_device(host: torch.Tensor, device: torch.device) -> torch.Tensor:
    """`host` on `device`, without waiting for the stream's queued work."""
    if device.type == "cuda":
        return host.pin_memory().to(device, non_blocking=True)
    return host.to(device)

"""The engine option `aligner_profile` (PATH:FIRST:COUNT): torch's profiler around COUNT aligner calls from call FIRST
(0-based, counted from the first after the warm-up), written to PATH as a table, to say what an aligner call's host
time is spent on in the loop (voxgate_engine_aligner_part_seconds says which part; this says which operations).

The profiler records the operations of the thread that starts it (the aligner's) and the CUDA runtime's calls of
every thread, which it files under that thread's id too (measured in the loop: 12 graph launches and 8 event waits a
call, where an aligner call makes 3 and none; the rest are the loop's), and the loop slows while it runs. So the
first table's operations are the aligner's, its runtime rows anyone's; a second table puts each runtime call under
the outermost operation whose time holds it: mostly the aligner's own (the tree is built by time, so another
thread's call made while an aligner operation ran lands under it too). Beside them: the
CUDA caching allocator's and the pinned-memory allocator's counters across the window (allocations from the driver,
retries after freeing the cache) and the cuFFT plans cached, which the operations' names alone do not show. A
diagnostic, off by default.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

log = logging.getLogger(__name__)
# The allocators' counters worth reading across the window (torch.cuda.memory_stats, host_memory_stats)
DEVICE_STATS = ("num_alloc_retries", "num_device_alloc", "num_device_free", "num_sync_all_streams",
                "segment.all.allocated", "segment.all.freed")
HOST_STATS = ("num_host_alloc", "num_host_free", "allocations.allocated", "segment.allocated")
MARKER = "aligner-thread"
NO_OPERATION = "(none: any thread's)"


@dataclass(frozen=True, slots=True)
class ProfileWindow:
    path: Path
    first: int
    count: int

    @classmethod
    def parse(cls, spec: str | None) -> ProfileWindow | None:
        """PATH:FIRST:COUNT (FIRST >= 0, COUNT >= 1), or None for none; a bad spec raises ValueError."""
        if not spec:
            return None
        path, _, rest = spec.rpartition(":")
        path, _, first = path.rpartition(":")
        if not path or not first.isdigit() or not rest.isdigit() or int(rest) < 1:
            raise ValueError(f"aligner_profile must be PATH:FIRST:COUNT (FIRST >= 0, COUNT >= 1), not {spec!r}")
        return cls(Path(path), int(first), int(rest))


def _stats(device: torch.device) -> dict[str, float]:
    if device.type != "cuda":
        return {}
    stats = {f"device {k}": float(v) for k, v in torch.cuda.memory_stats(device).items() if k in DEVICE_STATS}
    host = getattr(torch.cuda, "host_memory_stats", None)
    if host is not None:
        stats |= {f"pinned {k}": float(v) for k, v in host().items() if k in HOST_STATS}
    # cuFFT plans cached: each new shape of the features' frames makes one (torch.stft)
    stats["cufft plans cached"] = float(torch.backends.cuda.cufft_plan_cache[device.index or 0].size)
    return stats


class CallProfile:
    """Started by `before(window.first)` and stopped by `after(window.first + window.count - 1, ...)`, both called
    on the aligner's thread around each call; writes the table once."""

    def __init__(self, window: ProfileWindow, device: torch.device) -> None:
        self.window, self.device = window, device
        self._profiler: torch.profiler.profile | None = None
        self._before: dict[str, float] = {}
        self._walls: list[float] = []
        self.done = False

    def before(self, call: int) -> None:
        if self.done or call != self.window.first:
            return
        try:
            self._start()
        except Exception as exc:  # a diagnostic: the aligner goes on without it
            log.error("aligner_profile: the profiler did not start (%s)", exc)
            self._profiler, self.done = None, True

    def _start(self) -> None:
        activities = [torch.profiler.ProfilerActivity.CPU]
        if self.device.type == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self._before = _stats(self.device)
        self._profiler = torch.profiler.profile(activities=activities)
        self._profiler.start()
        with torch.profiler.record_function(MARKER):  # names this thread's id in the profiler's events
            pass

    def after(self, call: int, seconds: float) -> None:
        if self._profiler is None or self.done:
            return
        self._walls.append(seconds)
        if call < self.window.first + self.window.count - 1:
            return
        self.done = True
        try:
            self._profiler.stop()
            self.window.path.parent.mkdir(parents=True, exist_ok=True)
            self.window.path.write_text(self.table(self._profiler.events(), threading.get_native_id(),
                                                   _stats(self.device)))
        except Exception as exc:  # a diagnostic: the aligner goes on without it
            log.error("aligner_profile: no table written to %s (%s)", self.window.path, exc)

    def table(self, events: Any, native_tid: int, after: dict[str, float]) -> str:
        """Self CPU time by (thread, operation): the aligner's thread found by MARKER (and the OS's id for it)."""
        rows: dict[tuple[int, str], list[float]] = defaultdict(lambda: [0, 0.0])
        aligner = {native_tid}
        for e in events:
            if e.name == MARKER:
                aligner.add(e.thread)
            row = rows[(e.thread, e.name)]
            row[0] += 1
            row[1] += e.self_cpu_time_total
        calls = max(len(self._walls), 1)
        mine = sum(us for (t, _), (_, us) in rows.items() if t in aligner)
        others = sum(us for (t, _), (_, us) in rows.items() if t not in aligner)
        lines = [f"# The aligner's calls {self.window.first}-{self.window.first + calls - 1} under torch's profiler",
                 "", f"{calls} calls, {1000 * sum(self._walls) / calls:.2f} ms a call (wall, profiled); self CPU a "
                 f"call: under the aligner thread's ids {sorted(aligner)} {mine / 1000 / calls:.2f} ms (its "
                 f"operations, and CUDA runtime calls that may be any thread's), under others "
                 f"{others / 1000 / calls:.2f} ms",
                 "",
                 "| thread | aligner's | operation | calls a call | self CPU ms a call |", "|---:|---|---|---:|---:|"]
        for (thread, name), (n, us) in sorted(rows.items(), key=lambda kv: -kv[1][1])[:60]:
            lines.append(f"| {thread} | {'yes' if thread in aligner else ''} | `{name}` | {n / calls:.1f} | "
                         f"{us / 1000 / calls:.3f} |")
        lines += ["", "CUDA runtime calls by the outermost operation whose time holds them: under an operation, mostly "
                  "the aligner's; under none, any thread's (a graph's replay from Python, or another thread's call):",
                  "",
                  "| made in | runtime call | calls a call | self CPU ms a call |", "|---|---|---:|---:|"]
        made_in: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0, 0.0])
        for e in events:
            if e.thread in aligner and e.name.startswith("cu"):
                root = e
                while root.cpu_parent is not None:
                    root = root.cpu_parent
                row = made_in[(root.name if root is not e else NO_OPERATION, e.name)]
                row[0] += 1
                row[1] += e.self_cpu_time_total
        for (root_name, name), (n, us) in sorted(made_in.items(), key=lambda kv: -kv[1][1])[:30]:
            lines.append(f"| `{root_name}` | `{name}` | {n / calls:.1f} | {us / 1000 / calls:.3f} |")
        lines += ["", "| allocator counter | across the window |", "|---|---:|"]
        lines += [f"| {k} | {after[k] - self._before.get(k, 0.0):.0f} |" for k in sorted(after)]
        return "\n".join(lines) + "\n"

"""CUDA streams of the highest priority, for the step loop (engine option `loop_stream_priority`).

The GPU's block scheduler starts the blocks of a higher-priority stream's kernels before those of lower-priority
streams whenever an SM frees up; it never preempts a running block. A step loop whose kernels are short and
latency-bound then waits at most one block of the aligner's (or an upload's) large kernels, not their whole queue.
A CUDA graph replays at the priority of the stream it is launched into. The legacy default stream and streams made
without a priority have the lowest one.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

HIGHEST = -(1 << 10)  # torch maps a priority past the device's range to its greatest (a negative number)


def highest_priority_stream(device: torch.device) -> torch.cuda.Stream:
    return torch.cuda.Stream(device, priority=HIGHEST)


def enter_highest_priority(device: torch.device) -> Callable[[], None]:
    """A function that makes a new highest-priority stream the calling thread's current stream on `device`.

    Work queued on other streams before it (the weights' and voices' copies at load, on the legacy default
    stream, which a stream made by torch does not wait for) is finished first."""
    stream = highest_priority_stream(device)

    def enter() -> None:
        torch.cuda.synchronize(device)
        torch.cuda.set_stream(stream)

    return enter

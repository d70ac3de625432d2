"""GPU turns: a side thread's GPU work queued by the loop's thread between two steps, never beside them.

The engine loop's step is a chain of small kernels; a neighbour's big kernels (the forced aligner's GEMMs of
thousands of rows) on every SM make each of them wait for SMs, so the loop loses more than the neighbour's GPU time
(docs/benchmarks/h200-word-times: capacity -25 % where the aligner's GPU time is ~10 %). A turn orders the work
instead: the side thread hands `work` (a callable that queues kernels, a graph replay) to `take(work)` and blocks;
the loop's thread, at its next step boundary (`run_pending`), queues it on the side thread's CUDA stream after
everything the loop queued so far, and the loop's next kernels after it. The side thread goes on once it is queued,
not run. Off CUDA the work simply runs on the loop's thread, in the same order.

Until `open()` (the loop's thread started) and after `close()` (it stopped), `take` runs the work on the calling
thread, as if there were no turns. The loop must call `run_pending` at every step boundary and when it wakes, and
`wake` (given) must wake it, or a side thread waits for a loop that sleeps.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import TypeVar

import torch

T = TypeVar("T")


class _Turn:
    __slots__ = ("error", "inline", "queued", "result", "stream", "work")

    def __init__(self, work: Callable[[], object], stream: torch.cuda.Stream | None) -> None:
        self.work = work
        self.stream = stream  # the side thread's current CUDA stream (None off CUDA)
        self.queued = threading.Event()
        self.inline = False  # the loop stopped before its turn: the side thread runs it itself
        self.result: object = None
        self.error: Exception | None = None


class GpuTurns:
    def __init__(self, device: torch.device | str, wake: Callable[[], None] = lambda: None) -> None:
        self.device = torch.device(device)
        self.wake = wake  # set by the loop that takes the turns (EngineLoop: its wake-up event)
        self.taken = 0  # turns the loop's thread queued
        self._pending: deque[_Turn] = deque()
        self._lock = threading.Lock()
        self._open = False

    def open(self) -> None:
        """The loop's thread runs turns from now on (called on it)."""
        with self._lock:
            self._open = True

    def close(self) -> None:
        """The loop stops: turns still waiting, and any later, run on their own threads."""
        with self._lock:
            self._open = False
            waiting, self._pending = list(self._pending), deque()
        for turn in waiting:
            turn.inline = True
            turn.queued.set()

    def take(self, work: Callable[[], T]) -> T:
        """On the side thread: `work` queued in the loop's next turn, on this thread's current CUDA stream, between
        the loop's steps; returns what it returned once it is queued (its error is raised here)."""
        cuda = self.device.type == "cuda"
        turn = _Turn(work, torch.cuda.current_stream(self.device) if cuda else None)
        with self._lock:
            opened = self._open
            if opened:
                self._pending.append(turn)
        if not opened:
            return work()
        self.wake()
        turn.queued.wait()
        if turn.inline:
            return work()
        if turn.error is not None:
            raise turn.error
        return turn.result  # type: ignore[return-value]

    def run_pending(self) -> int:
        """On the loop's thread, at a step boundary: every waiting turn's work queued after the loop's work so far,
        and the loop's next work after it. Returns how many ran."""
        ran = 0
        while True:
            with self._lock:
                if not self._pending:
                    return ran
                turn = self._pending.popleft()
            try:
                if turn.stream is None:
                    turn.result = turn.work()
                else:
                    own = torch.cuda.current_stream(self.device)
                    turn.stream.wait_stream(own)  # after the steps queued so far
                    with torch.cuda.stream(turn.stream):
                        turn.result = turn.work()
                    own.wait_stream(turn.stream)  # the next step after it
            except Exception as exc:  # the side thread's error: raised there, the loop goes on
                turn.error = exc
            self.taken += 1
            ran += 1
            turn.queued.set()

"""EngineLoop: one worker thread owns the GPU and steps an EngineCore; asyncio sees only streams.

The event loop talks to the worker through a thread-safe inbox (add, abort) and a wake-up event; deadline hints
are plain attribute writes on the request (read once per step). After each step the worker makes one hand-off
into the event loop (`call_soon_threadsafe` once per step, not once per chunk) that fills every stream's queue.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any

import numpy as np

from .admission import Forecast, Held, LoopForecaster
from .base import AudioStream, EngineError, SynthesisRequest
from .core import EngineCore, StepOutput
from .request import Request, Status

log = logging.getLogger("voxgate.engine.loop")
_END = object()
IDLE_WAIT_S = 0.005  # an idle step's sleep when nothing wakes the loop (a far-ahead stream's turn comes with time)


class LoopStream(AudioStream):
    """One request's audio: chunks arrive in an asyncio.Queue filled by the loop's per-step hand-off."""

    def __init__(self, loop: EngineLoop, request: SynthesisRequest, engine_request: Request) -> None:
        self.request = request
        self.engine_request = engine_request
        self._loop = loop
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._done = False
        self._iterated = False
        self._handed_at: float | None = None  # the first chunk came into the event loop (first-audio timeline)
        engine_request.sink = self

    def cancel(self) -> None:
        if not self._done:
            self._done = True
            self._loop.abort(self.engine_request)
            self._queue.put_nowait(_END)
        # The request's reference back to this stream is a cycle: broken here (the worker reads `sink` once per
        # use and skips None), so an ended stream is freed by reference counting, not by the collector.
        self.engine_request.sink = None

    def report_playback(self, buffered_s: float) -> None:
        self.engine_request.report_playback(buffered_s)

    def first_audio_stamps(self) -> dict[str, float]:
        r = self.engine_request
        stamps = {"queue": r.prefill_launched_at, "prefill": r.decode_launched_at, "first_frame": r.first_frame_at,
                  "codec": r.first_decoded_at, "hand_over": self._handed_at}
        return {stage: at for stage, at in stamps.items() if at is not None}

    def _put(self, item: Any) -> None:  # on the event loop
        if not self._done:
            if item is _END or isinstance(item, BaseException):
                self._done = True
            elif self._handed_at is None:
                self._handed_at = time.monotonic()
            self._queue.put_nowait(item)

    async def __aiter__(self) -> AsyncIterator[np.ndarray]:
        if self._iterated:
            raise RuntimeError("an AudioStream can be iterated once")
        self._iterated = True
        try:
            while True:
                item = await self._queue.get()
                if item is _END:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            self.cancel()  # the consumer left early (or the end came): free the slot at the next step


class EngineLoop:
    """Steps `core` on a worker thread while it has work; `on_step(output, seconds)` sees every step there, and
    `forecaster` (admission.py) is fed every step's period and the streams held after it."""

    def __init__(self, core: EngineCore, name: str = "engine",
                 on_step: Callable[[StepOutput, float], None] | None = None,
                 gil_switch_s: float | None = 0.0005, forecaster: LoopForecaster | None = None) -> None:
        self.core = core
        core.hand_over_early = self._hand_over_early  # (first and last chunks, as soon as decoded: core.py)
        self.forecaster = forecaster
        # The worker needs the GIL back after every wait for the GPU; with CPython's default 5 ms switch interval
        # a busy event loop can hold it that long each time, stretching every step. Process-wide, set at start.
        self.gil_switch_s = gil_switch_s
        self.name = name
        self.on_step = on_step
        self._inbox: deque[tuple[str, Request]] = deque()
        self._wake = threading.Event()
        self._stop = False
        self._thread: threading.Thread | None = None
        self._aloop: asyncio.AbstractEventLoop | None = None
        # Streams submitted (event loop) and taken into the core (worker, counted when the forecaster next sees
        # them held): their difference is the inbox a forecast adds. Two ints, each written by one thread.
        self._submitted = 0
        self._taken = 0
        self._taken_unpublished = 0
        self.steps = 0
        self.error: str | None = None  # set when a step failed (the streams of that moment got the error)

    # -- event-loop side ------------------------------------------------------------------------------------------
    def start(self) -> None:
        self._aloop = asyncio.get_running_loop()
        if self.gil_switch_s is not None and sys.getswitchinterval() > self.gil_switch_s:
            sys.setswitchinterval(self.gil_switch_s)
        self._thread = threading.Thread(target=self._run, name=f"{self.name}-loop", daemon=True)
        self._thread.start()

    def submit(self, request: SynthesisRequest, engine_request: Request) -> LoopStream:
        if self._thread is None or self._stop:
            raise EngineError("not_ready", "the engine is not running")
        stream = LoopStream(self, request, engine_request)
        self._submitted += 1
        self._inbox.append(("add", engine_request))
        self._wake.set()
        return stream

    def abort(self, engine_request: Request) -> None:
        self._inbox.append(("abort", engine_request))
        self._wake.set()

    def wake(self) -> None:
        """Something a waiting stream needs has come (its next text): step again now."""
        self._wake.set()

    async def stop(self) -> None:
        self._stop = True
        self._wake.set()
        if self._thread is not None:
            await asyncio.get_running_loop().run_in_executor(None, self._thread.join, 30.0)
            self._thread = None

    def forecast(self, queued: int = 0) -> Forecast | None:
        """The forecaster's answer for one more stream, the inbox counted ahead of it (None: no forecaster)."""
        if self.forecaster is None:
            return None
        inbox = self._submitted - self._taken  # read before `held` (the worker writes them the other way round)
        return self.forecaster.forecast(queued + max(0, inbox))

    @property
    def queue_depth(self) -> int:
        """Requests admitted but not yet producing audio."""
        s = self.core.scheduler
        return len(s.waiting) + sum(1 for r in s.running if r.first_audio_at is None)

    # -- worker side ------------------------------------------------------------------------------------------------
    def _run(self) -> None:
        last_end: float | None = None  # the previous step's end, while steps follow each other without a wait
        while not self._stop:
            self._drain_inbox()
            if not self.core.has_work:
                self._publish()
                last_end = None
                self._wake.wait(0.5)
                self._wake.clear()
                continue
            t0 = time.perf_counter()
            try:
                out = self.core.step()
            except Exception as exc:  # a failed step fails its streams, never the process
                log.exception("engine step failed")
                self.error = f"{type(exc).__name__}: {exc}"
                failed = self.core.fail_all()
                error = EngineError("synthesis_failed", f"synthesis failed: {type(exc).__name__}")
                self._hand_over([(r, error) for r in failed])
                continue
            if out.idle:  # streams waiting for text (or far ahead of their listeners): sleep until woken
                self._publish()
                last_end = None
                self._wake.wait(IDLE_WAIT_S)
                self._wake.clear()
                continue
            self.steps += 1
            items: list[tuple[Request, Any]] = [(r, pcm) for r, pcm in out.chunks]
            items += [(r, _END) for r in out.finished]
            if items:
                self._hand_over(items)
            if self.on_step is not None:
                self.on_step(out, time.perf_counter() - t0)
            if self.forecaster is not None:
                end = time.perf_counter()
                # The period: from the step before's end (hand-over and bookkeeping included) while they follow
                # each other; after a wait, this step's own time.
                period = end - (last_end if last_end is not None else t0)
                self.forecaster.observe(out.num_rows, period, out.times.get("codec", 0.0),
                                        len(out.finished) + len(out.finished_early),
                                        time.monotonic())
                self._publish()
                last_end = end
        # Stopping: whatever is still live ends with an error its consumer can show.
        self._drain_inbox()
        failed = self.core.fail_all("stopped")
        if failed:
            self._hand_over([(r, EngineError("engine_stopped", "the engine stopped")) for r in failed])

    def _publish(self) -> None:
        """The streams held now, for the forecaster; then the inbox taken since (in that order: a forecast that reads
        between the two counts a stream twice, never not at all)."""
        if self.forecaster is None:
            return
        s = self.core.scheduler
        generating = len(s.waiting) + sum(1 for r in s.running if not r.ended)
        prefilling = len(s.waiting) + sum(1 for r in s.running if not r.prefilled)
        self.forecaster.publish(Held(generating, prefilling, len(s.waiting) + len(s.running)))
        self._taken += self._taken_unpublished
        self._taken_unpublished = 0

    def _drain_inbox(self) -> None:
        while self._inbox:
            op, request = self._inbox.popleft()
            if op == "add":
                self._taken_unpublished += 1
                sink = request.sink  # read once: the event loop clears it when the stream ends
                if request.status is Status.WAITING and sink is not None and not sink._done:
                    self.core.add(request)
            else:
                self.core.abort(request)

    def _hand_over_early(self, chunks: list[tuple[Request, np.ndarray]], finished: list[Request]) -> None:
        self._hand_over([*chunks, *((r, _END) for r in finished)])

    def _hand_over(self, items: list[tuple[Request, Any]]) -> None:
        loop = self._aloop
        if loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(_deliver, items)
        except RuntimeError:  # the event loop closed meanwhile
            pass


def _deliver(items: list[tuple[Request, Any]]) -> None:
    for request, item in items:
        sink = request.sink
        if sink is not None:
            sink._put(item)

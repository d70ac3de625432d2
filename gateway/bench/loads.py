"""Load shapes (shared/design/benchmarks.md): closed loop at concurrency c, open loop with Poisson arrivals.

A phase runs `warmup_s` then `duration_s`. Requests sent (closed) or scheduled (open) during the warm-up are kept
but marked and left out of every statistic; audio-s/s counts audio that arrived inside the measured window.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import Any

from .arrivals import poisson_arrivals
from .load_client import Client, HttpClient, Refused, ServerError, Trace, WsClient
from .stats import to_sample
from .workload import Workload

# A closed-loop client refused (engine_full) waits for the refusal's retry hint before its next request, at most
# MAX_RETRY_WAIT_S (the phase is short), RETRY_WAIT_S when the refusal said none: asking again at once only adds
# refusals, and a storm of them measures the clients, not the server.
RETRY_WAIT_S = 0.1
MAX_RETRY_WAIT_S = 1.0
MAX_IDLE_S = 30.0  # the gateway closes a session idle for limits.idle_timeout_s (60 s by default)


@dataclass(slots=True)
class Target:
    """Where and how to send requests."""

    base_url: str  # http://127.0.0.1:PORT
    transport: str = "ws"  # "ws" or "http"
    frame_ms: int = 20
    voice: str | None = None
    deflate: bool = False  # WebSocket permessage-deflate
    codec: str = "pcm_s16le"
    text_wps: float | None = None  # WebSocket text word by word at this rate (None: all at once)
    timestamps: bool = False  # WebSocket sessions with word timestamps (session.start `timestamps: "word"`)
    timestamps_hold: bool | None = None  # with them, session.start `timestamps_hold` (None: not sent)
    http: Any = None  # a shared httpx.AsyncClient, opened by `open()`

    @property
    def ws_url(self) -> str:
        return self.base_url.replace("http://", "ws://", 1).replace("https://", "wss://", 1) + "/v1/tts/ws"

    async def open(self) -> None:
        if self.transport == "http" and self.http is None:
            import httpx

            limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
            self.http = httpx.AsyncClient(base_url=self.base_url, limits=limits, timeout=httpx.Timeout(120.0))

    async def aclose(self) -> None:
        if self.http is not None:
            await self.http.aclose()
            self.http = None

    async def client(self) -> Client:
        if self.transport == "ws":
            return await WsClient.connect(self.ws_url, self.frame_ms, self.voice, self.deflate, self.codec,
                                          self.text_wps, self.timestamps, self.timestamps_hold)
        if self.transport == "http":
            return HttpClient(self.http, self.voice)
        raise ValueError(f"unknown transport {self.transport!r}")


@dataclass(slots=True)
class PhaseResult:
    """One phase: its parameters, every request's sample, and what the client itself saw of its own health."""

    params: dict[str, Any]
    samples: list[dict[str, Any]] = field(default_factory=list)
    window_s: float = 0.0
    window_audio_s: float = 0.0  # audio that arrived inside the measured window
    peak_in_flight: int = 0
    loop_lag_ms: dict[str, float] = field(default_factory=dict)


class LagMonitor:
    """Measures the client's own event-loop lag: if the load generator is late, its numbers are suspect."""

    def __init__(self, interval_s: float = 0.005) -> None:
        self.interval_s = interval_s
        self.lags: list[float] = []
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            t = time.perf_counter()
            await asyncio.sleep(self.interval_s)
            self.lags.append(max(0.0, time.perf_counter() - t - self.interval_s))

    def __enter__(self) -> LagMonitor:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()

    def summary(self) -> dict[str, float]:
        if not self.lags:
            return {}
        lags = sorted(self.lags)
        return {"p50": lags[len(lags) // 2] * 1e3, "p99": lags[int(len(lags) * 0.99)] * 1e3, "max": lags[-1] * 1e3}


class _Flight:
    def __init__(self) -> None:
        self.now = 0
        self.peak = 0

    @contextlib.contextmanager
    def request(self):  # type: ignore[no-untyped-def]
        self.now += 1
        self.peak = max(self.peak, self.now)
        try:
            yield
        finally:
            self.now -= 1


def _collect(result: PhaseResult, traces: list[Trace], t0: float, warmup_s: float, duration_s: float) -> None:
    start, end = t0 + warmup_s, t0 + warmup_s + duration_s
    result.window_s = duration_s
    result.window_audio_s = sum(d for tr in traces for (t, d) in tr.chunks if start <= t < end)
    for tr in traces:
        if tr.done is None and tr.error is None and not tr.refused:
            tr.error = "unfinished when the phase drained"
        # warm-up: sent (closed) or scheduled (open) before the window; the caller sets `scheduled` accordingly
        result.samples.append(to_sample(tr, t0, warmup=tr.scheduled < start))


async def _drain(tasks: list[asyncio.Task[Any]], drain_s: float) -> None:
    if not tasks:
        return
    _, pending = await asyncio.wait(tasks, timeout=drain_s)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)


def _params(
    shape: str, target: Target, workload: Workload, warmup_s: float, duration_s: float, seed: int, **load: float
) -> dict[str, object]:
    """A phase's parameters as its report names them; `load` is the concurrency or the rate."""
    return {
        "shape": shape,
        "transport": target.transport,
        "workload": workload.name,
        **load,
        "warmup_s": warmup_s,
        "duration_s": duration_s,
        "seed": seed,
    }


async def run_closed(
    target: Target,
    workload: Workload,
    concurrency: int,
    warmup_s: float,
    duration_s: float,
    seed: int = 1,
    drain_s: float = 60.0,
) -> PhaseResult:
    """`concurrency` clients, each sending its next request when the previous one finishes."""
    result = PhaseResult(_params("closed", target, workload, warmup_s, duration_s, seed, concurrency=concurrency))
    # A session refused at the start (engine_full) is asked for again by its worker's first request.
    opened = await asyncio.gather(*(target.client() for _ in range(concurrency)), return_exceptions=True)
    for outcome in opened:
        if isinstance(outcome, BaseException) and not isinstance(outcome, Refused):
            raise outcome
    clients: list[Client | None] = [c if not isinstance(c, BaseException) else None for c in opened]
    order = workload.order(seed)
    counter = iter(range(1 << 62))
    traces: list[Trace] = []
    flight = _Flight()
    t0 = time.perf_counter()
    stop = t0 + warmup_s + duration_s

    async def worker(client: Client | None) -> None:
        try:
            while time.perf_counter() < stop:
                i = order[next(counter) % len(order)]
                text = workload.texts[i]
                trace = Trace(i, len(text.split()), workload.max_audio_ms(i), scheduled=time.perf_counter())
                traces.append(trace)
                with flight.request():
                    try:
                        if client is None:  # the last session was lost, or refused: a fresh one
                            client = await target.client()
                        await client.speak(trace, text)
                    except Refused as exc:  # a new session refused (engine_full): answered, not an error
                        trace.sent = trace.sent or trace.scheduled
                        trace.refusal_s = time.perf_counter() - trace.scheduled
                        trace.retry_after_s = exc.retry_after_s
                    except ServerError:  # the session is gone: the next request gets a fresh one
                        if client is not None:
                            await client.close()
                        client = None
                if trace.refused:  # as a polite client does: ask again after the refusal's hint
                    wait = RETRY_WAIT_S if trace.retry_after_s is None else min(trace.retry_after_s, MAX_RETRY_WAIT_S)
                    await asyncio.sleep(max(0.0, min(wait, stop - time.perf_counter())))
        finally:
            if client is not None:
                await client.close()

    with LagMonitor() as lag:
        tasks = [asyncio.create_task(worker(c)) for c in clients]
        await asyncio.sleep(max(0.0, stop - time.perf_counter()))
        await _drain(tasks, drain_s)
    result.peak_in_flight = flight.peak
    result.loop_lag_ms = lag.summary()
    _collect(result, traces, t0, warmup_s, duration_s)
    return result


async def run_open(
    target: Target,
    workload: Workload,
    rate: float,
    warmup_s: float,
    duration_s: float,
    seed: int = 1,
    drain_s: float = 60.0,
    pool: int = 0,
    shard: tuple[int, int] = (0, 1),
    start_at: float | None = None,
) -> PhaseResult:
    """Poisson arrivals at `rate`/s for warm-up + duration; each arrival takes an idle session (or opens one).
    `shard` (j, n): only arrivals k with k % n == j, on a schedule that starts at `start_at` (time.perf_counter(),
    one clock for every process: client_procs.py); by default all of them, from when the pool is open."""
    result = PhaseResult(_params("open", target, workload, warmup_s, duration_s, seed, rate=rate))
    schedule = poisson_arrivals(rate, warmup_s + duration_s, seed)
    order = workload.order(seed)
    now = time.monotonic()
    # idle sessions with the time each was last used: one idle longer than MAX_IDLE_S is closed rather than reused,
    # so that the server's idle timeout never turns into a request error that the gateway did not cause
    idle: list[tuple[Client, float]] = [(c, now) for c in await asyncio.gather(*(target.client() for _ in range(pool)))]
    traces: list[Trace] = []
    flight = _Flight()
    tasks: list[asyncio.Task[None]] = []

    async def session() -> Client:
        while idle:
            client, used = idle.pop()
            if time.monotonic() - used < MAX_IDLE_S:
                return client
            await client.close()
        return await target.client()

    async def one(k: int, scheduled: float) -> None:
        i = order[k % len(order)]
        text = workload.texts[i]
        trace = Trace(i, len(text.split()), workload.max_audio_ms(i), scheduled=scheduled)
        traces.append(trace)
        with flight.request():
            asked = time.perf_counter()
            try:
                client = await session()
            except Refused:  # a new session refused (engine_full): answered, not an error
                trace.sent = asked
                trace.refusal_s = time.perf_counter() - asked
                return
            except Exception as exc:
                trace.error = f"connect: {type(exc).__name__}: {exc}"
                return
            try:
                await client.speak(trace, text)
            except (ServerError, asyncio.CancelledError):  # a broken session, or one cancelled at the drain
                await client.close()
                return
            idle.append((client, time.monotonic()))

    with LagMonitor() as lag:
        t0 = time.perf_counter() if start_at is None else start_at
        await asyncio.sleep(max(0.0, t0 - time.perf_counter()))
        for k, at in enumerate(schedule):
            if k % shard[1] != shard[0]:
                continue
            delay = t0 + at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(k, t0 + at)))
        await asyncio.sleep(max(0.0, t0 + warmup_s + duration_s - time.perf_counter()))
        await _drain(tasks, drain_s)
    await asyncio.gather(*(c.close() for c, _ in idle))
    result.peak_in_flight = flight.peak
    result.loop_lag_ms = lag.summary()
    _collect(result, traces, t0, warmup_s, duration_s)
    return result

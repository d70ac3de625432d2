"""Test helpers: an engine wrapper that records exactly what the engine produced, a server context, real processes
(`spawn`, and `serve_process` for `voxgate serve`: the one way tests start them), raw websockets helpers, and the
bystander: a session that must keep speaking while a test misbehaves elsewhere."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import numpy as np
import websockets
from process_support import VOXGATE, ServeProcess, Spawned, Stop, free_port, serve_process, spawn  # noqa: F401
from voxgate.client.protocol_client import VoxgateClient
from voxgate.engine.base import AudioStream, Engine, SynthesisRequest, VoiceInfo
from voxgate.engine.words import WordTime
from voxgate.gateway.app import create_app
from voxgate.gateway.config import GatewayConfig
from voxgate.gateway.protocol import PROTOCOL
from voxgate.gateway.transport.uvicorn_server import BackgroundServer

BYSTANDER_TEXT = "A second session keeps speaking meanwhile."  # 2.2 s of fake-engine audio
PASSAGE = "The birch canoe slid on the smooth planks. Glue the sheet to the dark blue background."  # ~5 s


async def until(predicate: Callable[[], object], timeout_s: float = 10.0, what: str = "the condition") -> None:
    """Until `predicate()` holds, checked every 5 ms; the timeout only guards against a hang."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, f"{what} did not happen within {timeout_s:g} s"
        await asyncio.sleep(0.005)


async def slots_free(engine: Any, timeout_s: float = 10.0) -> None:
    """Until every slot of a Qwen3-TTS engine's pool is free (the loop frees a cancelled stream's slot at its next
    step boundary)."""
    pool = engine.runner.kv
    await until(lambda: pool.num_free == pool.max_streams, timeout_s, "every slot free")


class RecordingStream(AudioStream):
    def __init__(self, inner: AudioStream, sink: list[np.ndarray]) -> None:
        self.request = inner.request
        self._inner = inner
        self._sink = sink
        self.appended: list[str] = []  # text given by append_text, in order

    def cancel(self) -> None:
        self._inner.cancel()

    def append_text(self, text: str) -> None:
        self._inner.append_text(text)
        self.appended.append(text)

    def end_text(self) -> None:
        self._inner.end_text()

    def can_append_text(self, text: str) -> bool:
        return self._inner.can_append_text(text)

    def first_audio_stamps(self) -> dict[str, float]:
        return self._inner.first_audio_stamps()

    def take_words(self) -> list[WordTime]:
        return self._inner.take_words()

    async def __aiter__(self) -> AsyncIterator[np.ndarray]:
        async for chunk in self._inner:
            self._sink.append(chunk.copy())
            yield chunk


class RecordingEngine(Engine):
    """Wraps an engine; `produced` keeps every request's chunks, in request order."""

    def __init__(self, inner: Engine) -> None:
        self.inner = inner
        self.name = inner.name
        self.supports_instruct = inner.supports_instruct
        self.supports_text_streaming = inner.supports_text_streaming
        self.supports_word_times = inner.supports_word_times
        self.word_times_by_sentence = inner.word_times_by_sentence
        self.produced: list[tuple[SynthesisRequest, list[np.ndarray]]] = []
        self.streams: list[RecordingStream] = []  # in request order, beside `produced`

    async def start(self) -> None:
        await self.inner.start()

    async def stop(self) -> None:
        await self.inner.stop()

    @property
    def ready(self) -> bool:
        return self.inner.ready

    @property
    def queue_depth(self) -> int:
        return self.inner.queue_depth

    @property
    def free_rows(self) -> int | None:
        return self.inner.free_rows

    def admission_forecast(self, queued: int = 0) -> Any:
        return self.inner.admission_forecast(queued)

    @property
    def requires_instruct(self) -> bool:  # type: ignore[override]
        return self.inner.requires_instruct  # known once the engine has started

    def voices(self) -> list[VoiceInfo]:
        return self.inner.voices()

    def default_voice(self) -> str | None:
        return self.inner.default_voice()

    def language_for(self, tag: str, name: str) -> str | None:
        return self.inner.language_for(tag, name)

    def info(self) -> dict[str, object]:
        return self.inner.info()

    def word_times_unavailable(self) -> str:
        return self.inner.word_times_unavailable()

    def register_metrics(self, registry: Any) -> None:
        self.inner.register_metrics(registry)

    @property
    def supports_voice_upload(self) -> bool:  # type: ignore[override]
        return self.inner.supports_voice_upload

    def voice_prompt(self, audio: np.ndarray, sample_rate: int, ref_text: str | None) -> dict[str, np.ndarray]:
        return self.inner.voice_prompt(audio, sample_rate, ref_text)

    def add_voice(self, voice_id: str, prompt: dict[str, np.ndarray], ref_text: str | None) -> None:
        self.inner.add_voice(voice_id, prompt, ref_text)

    def remove_voice(self, voice_id: str) -> None:
        self.inner.remove_voice(voice_id)

    def open_stream(self, request: SynthesisRequest) -> AudioStream:
        sink: list[np.ndarray] = []
        self.produced.append((request, sink))
        stream = RecordingStream(self.inner.open_stream(request), sink)
        self.streams.append(stream)
        return stream

    def audio_for(self, predicate=lambda request: True) -> np.ndarray:
        parts = [c for request, chunks in self.produced if predicate(request) for c in chunks]
        return np.concatenate(parts) if parts else np.zeros(0, np.int16)


def first_audio_stages(metrics_text: str, endpoint: str) -> dict[str, tuple[float, float]]:
    """stage -> (count, sum) of `voxgate_first_audio_stage_seconds` for `endpoint`, in the order /metrics lists
    them (the order they were first observed in)."""
    from voxgate.gateway.bench.server_metrics import parse

    family = "voxgate_first_audio_stage_seconds"
    out: dict[str, list[float]] = {}
    for (name, labels), value in parse(metrics_text)[0].items():
        named = dict(labels)
        if named.get("endpoint") == endpoint and name in (family + "_count", family + "_sum"):
            out.setdefault(named["stage"], [0.0, 0.0])[name.endswith("_sum")] = value
    return {stage: (count, total) for stage, (count, total) in out.items()}


@contextlib.contextmanager
def running_gateway(engine: Engine, config: GatewayConfig | None = None) -> Iterator[BackgroundServer]:
    with BackgroundServer(create_app(engine, config or GatewayConfig())) as server:
        yield server


async def connect(url: str, **start: Any) -> tuple[Any, dict[str, Any]]:
    """A raw websockets connection with a started session: returns (ws, session.started)."""
    ws = await websockets.connect(url, subprotocols=[PROTOCOL], max_size=None, compression=None)
    await ws.send(json.dumps({"type": "session.start", **start}))
    started = json.loads(await ws.recv())
    assert started["type"] == "session.started", started
    return ws, started


async def next_json(ws: Any, timeout: float = 5.0, skip_binary: bool = True) -> dict[str, Any]:
    """The next JSON message (binary frames skipped)."""
    import asyncio

    while True:
        raw = await asyncio.wait_for(ws.recv(), timeout)
        if isinstance(raw, bytes):
            if skip_binary:
                continue
            raise AssertionError("unexpected binary frame")
        return json.loads(raw)


async def errors_until_pong(ws: Any) -> list[dict[str, Any]]:
    """The errors the server sends before it answers a ping sent now (it answers in order)."""
    await ws.send(json.dumps({"type": "ping"}))
    errors = []
    while (message := await next_json(ws))["type"] != "pong":
        if message["type"] == "error":
            errors.append(message)
    return errors


async def next_error(ws: Any, timeout: float = 5.0) -> dict[str, Any]:
    """The next `error` or `warning` message (everything else skipped)."""
    while True:
        message = await next_json(ws, timeout)
        if message["type"] in ("error", "warning"):
            return message


@contextlib.asynccontextmanager
async def bystander(url: str, text: str = BYSTANDER_TEXT, *, voice: str | None = "tone-a",
                    pacing: str = "client_clock") -> AsyncIterator[VoxgateClient]:
    """A listener (by default `client_clock`, the simulated player) speaking while the test misbehaves elsewhere; at
    the end its context must be done, without errors and without a pause over 10 ms. `voice`: the fake engine's."""
    async with VoxgateClient(url, pacing=pacing, voice=voice) as client:
        speaking = asyncio.get_running_loop().create_task(client.speak("bystander", text))
        yield client
        result = await asyncio.wait_for(speaking, 60)
        if pacing != "asap":  # (asap: all audio is in and nothing more can pause; the session would sit idle)
            await client.player.drained()
        assert result.event("context.done") is not None
        assert not client.errors, client.errors
        await no_pause_from_the_server(client)


async def no_pause_from_the_server(client: VoxgateClient, limit_s: float = 0.010, wait_s: float = 3.0) -> None:
    """The simulated player heard no pause over `limit_s` that the server caused. The test client shares the
    machine's cores with the server (on CI, with other tests too): a gap it heard counts against the server unless
    the server, told of it by the player's playback reports, attributes it to the network or the client (the
    audio was sent in time and this process read it late), or sent it late (`pacing`) while its own event loop was
    held for at least half the gap (`loop_held_ms`: the machine starved the server). A gap the server never
    attributes fails."""
    gaps = client.player.gaps_over(limit_s)
    if not gaps:
        return

    def reported() -> list[dict[str, Any]]:
        return [m for m in client.messages if m.get("type") == "stall" and m["duration_ms"] > limit_s * 1000 / 2]

    deadline = time.monotonic() + wait_s
    while len(reported()) < len(gaps) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    stalls = reported()
    assert stalls, f"gaps over {limit_s * 1000:g} ms the server never attributed: {gaps}"
    assert not server_caused(stalls), (gaps, stalls)


def server_caused(stalls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The `stall` messages the server's own doing explains: `generation`, or `pacing` while its event loop ran."""
    return [m for m in stalls if m["cause"] == "generation"
            or (m["cause"] == "pacing" and m.get("loop_held_ms", 0.0) < m["duration_ms"] / 2)]


async def bystander_until_heard(url: str, heard: asyncio.Event, text: str = PASSAGE) -> None:
    """`bystander` as a task that sets `heard` once all of its audio has arrived (the rest plays from the player's
    buffer while the test misbehaves); awaiting the task checks it."""
    async with bystander(url, text) as client:
        while not client.player.received_end:
            await asyncio.sleep(0.01)
        heard.set()


def cpu_loop_config(**fields: Any) -> Any:
    """A GatewayConfig for the qwen3tts engine loop on the CPU (tiny checkpoints): admission by queue, not by
    deadline. On a loaded 2-core machine a tiny model's eager CPU steps are slower than the first-audio SLO allows,
    and the deadline forecast then rightly refuses new turns (engine_full); these tests are about speech, admission
    has its own (tests/qwen3tts/test_admission.py, tests/test_admission.py)."""
    from voxgate.gateway.config import GatewayConfig

    return GatewayConfig(**{"admission": "queue", **fields})

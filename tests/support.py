"""Test helpers: an engine wrapper that records exactly what the engine produced, and a server context."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import numpy as np
import websockets
from voxgate.engine.base import AudioStream, Engine, SynthesisRequest, VoiceInfo
from voxgate.gateway.app import create_app
from voxgate.gateway.config import GatewayConfig
from voxgate.gateway.protocol import PROTOCOL
from voxgate.gateway.server import BackgroundServer


class RecordingStream(AudioStream):
    def __init__(self, inner: AudioStream, sink: list[np.ndarray]) -> None:
        self.request = inner.request
        self._inner = inner
        self._sink = sink

    def cancel(self) -> None:
        self._inner.cancel()

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
        self.produced: list[tuple[SynthesisRequest, list[np.ndarray]]] = []

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

    def voices(self) -> list[VoiceInfo]:
        return self.inner.voices()

    def default_voice(self) -> str | None:
        return self.inner.default_voice()

    def info(self) -> dict[str, object]:
        return self.inner.info()

    def register_metrics(self, registry: Any) -> None:
        self.inner.register_metrics(registry)

    def open_stream(self, request: SynthesisRequest) -> AudioStream:
        sink: list[np.ndarray] = []
        self.produced.append((request, sink))
        return RecordingStream(self.inner.open_stream(request), sink)

    def audio_for(self, predicate=lambda request: True) -> np.ndarray:
        parts = [c for request, chunks in self.produced if predicate(request) for c in chunks]
        return np.concatenate(parts) if parts else np.zeros(0, np.int16)


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


async def next_error(ws: Any, timeout: float = 5.0) -> dict[str, Any]:
    """The next `error` or `warning` message (everything else skipped)."""
    while True:
        message = await next_json(ws, timeout)
        if message["type"] in ("error", "warning"):
            return message

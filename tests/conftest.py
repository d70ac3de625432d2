"""Shared fixtures: a real uvicorn gateway on 127.0.0.1 (free port) around a chosen engine."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from support import RecordingEngine, running_gateway
from voxgate.engine.espeak import EspeakEngine
from voxgate.engine.fake import FakeEngine
from voxgate.gateway.config import GatewayConfig
from voxgate.gateway.transport.uvicorn_server import BackgroundServer


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`perf` tests measure wall-clock speed: they run only when the `-m` expression names them (`pytest -m perf`,
    on a quiet machine), never in the default run or in `-m "not slow"`. A session-wide hook: it sees e2e/ too."""
    if "perf" in (config.getoption("markexpr") or ""):
        return
    perf = [item for item in items if item.get_closest_marker("perf") is not None]
    if perf:
        config.hook.pytest_deselected(items=perf)
        items[:] = [item for item in items if item.get_closest_marker("perf") is None]


@pytest.fixture
def gateway() -> Iterator[Callable[..., BackgroundServer]]:
    """`gateway(engine=None, **config)`: start a server (espeak by default, recorded); stopped after the test."""
    stack: list = []

    def start(engine=None, config: GatewayConfig | None = None, **fields) -> BackgroundServer:
        engine = engine if engine is not None else RecordingEngine(EspeakEngine())
        cm = running_gateway(engine, config or GatewayConfig(**fields))
        server = cm.__enter__()
        stack.append(cm)
        return server

    yield start
    for cm in reversed(stack):
        cm.__exit__(None, None, None)


@pytest.fixture
def fake_engine() -> Callable[..., RecordingEngine]:
    return lambda **options: RecordingEngine(FakeEngine(**options))

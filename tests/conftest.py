"""Shared fixtures: a real uvicorn gateway on 127.0.0.1 (free port) around a chosen engine."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator

import pytest
from support import RecordingEngine, running_gateway
from voxgate.engine.espeak import EspeakEngine
from voxgate.engine.fake import FakeEngine
from voxgate.gateway.config import GatewayConfig
from voxgate.gateway.transport.uvicorn_server import BackgroundServer


def _share_the_cores_between_workers() -> None:
    """Under `pytest -n N`, each worker (and every process it starts, through the environment) gets its share of the
    cores for OpenMP. Left at its default, torch in every worker runs one thread per core, and OpenMP's spinning
    threads then fight each other: on 2 cores with 2 workers a tiny-checkpoint test ran 17.5 s instead of 2.4 s."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers <= 1:
        return
    threads = str(max(1, len(os.sched_getaffinity(0)) // workers))
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(name, threads)
    if "torch" in sys.modules:  # imported before this conftest: the environment came too late for it
        sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


_share_the_cores_between_workers()


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

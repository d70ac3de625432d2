"""What a balancer reads and meets (issue 17): GET /health/load and its header, admission refusing a full engine
(`engine_full`, close 1013 / HTTP 503), counted for every session of the engine together, so an open session's new
context is refused too (issue 23.3); metrics labelled with the device; and how `--device` / `--gpus` pick GPUs."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
import websockets
from support import connect, errors_until_pong, free_port, next_json
from voxgate.engine.fake import FakeEngine
from voxgate.gateway.cli.devices import check_device, narrow_to, parse_gpus, visible_gpus
from voxgate.gateway.protocol import PROTOCOL


class FullEngine(FakeEngine):
    """A fake engine with every row taken and `queued` streams waiting."""

    def __init__(self, queued: int) -> None:
        super().__init__()
        self.queued = queued

    @property
    def free_rows(self) -> int:
        return 0

    @property
    def queue_depth(self) -> int:
        return self.queued


def test_health_load_reports_sessions_rows_and_queue(gateway):
    server = gateway(FullEngine(queued=1), max_queued_streams=4, max_sessions=10, device="cuda:3")
    response = httpx.get(server.http_url + "/health/load")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "load": 0.25, "accepting": True, "sessions": 0, "max_sessions": 10,
                               "free_sessions": 10, "queued_streams": 1, "max_queued_streams": 4, "free_rows": 0,
                               "device": "cuda:3"}
    assert response.headers["X-Voxgate-Load"] == "0.2500"
    assert httpx.get(server.http_url + "/health").headers["X-Voxgate-Load"] == "0.2500"


def test_metrics_carry_the_device_label(gateway):
    server = gateway(FullEngine(queued=2), device="cuda:3")
    text = httpx.get(server.http_url + "/metrics").text
    assert 'voxgate_engine_queue_depth{device="cuda:3"} 2.0' in text
    assert 'voxgate_engine_free_rows{device="cuda:3"} 0.0' in text
    assert 'voxgate_draining{device="cuda:3"} 0.0' in text


def test_metrics_without_a_device_stay_unlabelled(gateway):
    server = gateway(FakeEngine())
    text = httpx.get(server.http_url + "/metrics").text
    assert "voxgate_sessions_open 0.0" in text and "voxgate_engine_free_rows" not in text


async def test_a_full_engine_refuses_new_sessions_with_1013(gateway):
    server = gateway(FullEngine(queued=4), max_queued_streams=4)
    async with websockets.connect(server.ws_url, subprotocols=[PROTOCOL]) as ws:
        error = await next_json(ws)
        assert error["code"] == "engine_full" and error["fatal"]
        await ws.wait_closed()
    assert ws.close_code == 1013
    response = httpx.post(server.http_url + "/v1/audio/speech", json={"input": "hi", "voice": "tone-a"})
    assert response.status_code == 503 and response.json()["error"]["code"] == "engine_full"
    load = httpx.get(server.http_url + "/health/load").json()
    assert load["accepting"] is False and load["load"] == 1.0


async def agent_line(port: int) -> str:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    line = (await asyncio.wait_for(reader.read(100), 5)).decode()
    writer.close()
    return line


async def test_the_haproxy_agent_weighs_by_load_and_drains_a_full_backend(gateway):
    """agent_port: each connection gets one line and is closed: "up ready N%" with N = 100 - the load in %, "drain"
    while a new stream would be refused (HAProxy then sends new sessions to the other backends)."""
    idle_port, full_port = free_port(), free_port()
    idle = gateway(FullEngine(queued=1), max_queued_streams=4, agent_port=idle_port)
    assert await agent_line(idle_port) == "up ready 75%\n"  # /health/load's load: 0.25 (one of four queued)
    assert httpx.get(idle.http_url + "/health/load").json()["load"] == 0.25
    gateway(FullEngine(queued=4), max_queued_streams=4, agent_port=full_port)
    assert await agent_line(full_port) == "drain\n"


async def test_the_agent_leaves_counting_sessions_to_the_balancer(gateway):
    """Open sessions fill /health/load's session table, not the agent's weight: HAProxy's leastconn counts them
    itself (a weight from the same count would count them twice, a check interval late)."""
    port = free_port()
    server = gateway(FakeEngine(), max_sessions=4, agent_port=port)
    a, _ = await connect(server.ws_url)
    b, _ = await connect(server.ws_url)
    assert httpx.get(server.http_url + "/health/load").json()["load"] == 0.5
    assert await agent_line(port) == "up ready 100%\n"
    await a.close()
    await b.close()


async def test_admission_is_off_by_default(gateway):
    server = gateway(FullEngine(queued=1000))
    async with websockets.connect(server.ws_url, subprotocols=[PROTOCOL]) as ws:
        await ws.send('{"type": "session.start"}')
        assert (await next_json(ws))["type"] == "session.started"


def queued_stream_server(gateway, limit: int = 2):
    """A fake engine whose streams wait a minute for their first audio (they stay queued), admission by queue (the
    forecast would refuse every stream but one: a minute is past any SLO) at `limit`."""
    return gateway(FakeEngine(first_chunk_ms=60_000), max_queued_streams=limit, admission="queue")


async def speak(ws, context_id: str) -> None:
    await ws.send(json.dumps({"type": "text.append", "context_id": context_id, "text": "Hello there."}))
    await ws.send(json.dumps({"type": "context.end", "context_id": context_id}))


async def test_a_full_engine_refuses_new_contexts_of_open_sessions(gateway):
    server = queued_stream_server(gateway)
    a, _ = await connect(server.ws_url)
    b, _ = await connect(server.ws_url)
    await speak(a, "a1")
    await speak(b, "b1")  # two streams queued, one by each session: the engine is full
    assert await errors_until_pong(b) == []
    await speak(a, "a2")
    refusal, end = await errors_until_pong(a)  # (its context.end then names a context that was never opened)
    assert refusal == {"type": "error", "code": "engine_full", "fatal": False, "context_id": "a2",
                       "message": "the engine is full; retry this context later", "retry_after_ms": 1000}
    assert end["code"] == "unknown_context" and end["context_id"] == "a2"
    async with websockets.connect(server.ws_url, subprotocols=[PROTOCOL]) as refused:  # a new session too
        assert (await next_json(refused))["code"] == "engine_full"
    speech = httpx.post(server.http_url + "/v1/audio/speech", json={"input": "hi", "voice": "tone-a"})
    assert speech.status_code == 503 and speech.json()["error"]["code"] == "engine_full"
    load = httpx.get(server.http_url + "/health/load").json()
    assert load["queued_streams"] == 2 and not load["accepting"] and load["load"] == 1.0

    # a1 cancelled: its place in the queue is free, and the refused id may be used again
    await a.send(json.dumps({"type": "context.cancel", "context_id": "a1"}))
    assert (await next_json(a))["type"] == "context.cancelled"
    await speak(a, "a2")
    assert await errors_until_pong(a) == []
    assert httpx.get(server.http_url + "/health/load").json()["queued_streams"] == 2
    await a.close()
    await b.close()


async def test_a_burst_of_new_contexts_is_admitted_up_to_the_limit(gateway):
    """Contexts opened faster than their producers hand streams to the engine still count: of 9 sent at once,
    2 are admitted."""
    server = queued_stream_server(gateway)
    ws, _ = await connect(server.ws_url)
    for k in range(9):
        await speak(ws, f"c{k}")
    errors = await errors_until_pong(ws)
    refused = [e["context_id"] for e in errors if e["code"] == "engine_full"]
    assert refused == [f"c{k}" for k in range(2, 9)], errors
    assert {e["context_id"] for e in errors} == set(refused)  # (their context.end: unknown_context, also refused)
    assert httpx.get(server.http_url + "/health/load").json()["queued_streams"] == 2
    await ws.close()


def test_narrow_to_one_gpu():
    env: dict[str, str] = {}
    assert narrow_to("cuda:1", env) == "cuda:0" and env == {"CUDA_VISIBLE_DEVICES": "1"}
    env = {"CUDA_VISIBLE_DEVICES": "2,GPU-abc"}  # indices count among the visible GPUs, as CUDA's do
    assert narrow_to("cuda:1", env) == "cuda:0" and env == {"CUDA_VISIBLE_DEVICES": "GPU-abc"}
    with pytest.raises(ValueError, match="only 2 GPU"):
        narrow_to("cuda:2", {"CUDA_VISIBLE_DEVICES": "2,3"})
    env = {}
    assert narrow_to("cuda", env) == "cuda" and narrow_to("cpu", env) == "cpu" and env == {}


def test_parse_gpus():
    assert parse_gpus("0,1") == [0, 1]
    assert parse_gpus("all", {"CUDA_VISIBLE_DEVICES": "4,5,6"}) == [0, 1, 2]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == []
    for bad in ("", "0,0", "-1", "x"):
        with pytest.raises(ValueError):
            parse_gpus(bad)
    with pytest.raises(ValueError, match="no GPU is visible"):
        parse_gpus("all", {"CUDA_VISIBLE_DEVICES": ""})


def test_check_device():
    for good in ("", "cpu", "cuda", "cuda:0", "cuda:12"):
        check_device(good)
    for bad in ("banana", "cuda:", "cuda:01", "cuda:-1", "CUDA:0", "cuda:0,1", " cpu"):
        with pytest.raises(ValueError, match="device must be cpu, cuda or cuda:N"):
            check_device(bad)

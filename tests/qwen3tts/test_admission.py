"""Admission on a tiny Qwen3-TTS checkpoint on the CPU (issue 26): two slots held by streamed turns waiting for
their text fill the engine; every door then refuses at once (no slot: engine_full, Retry-After / retry_after_ms,
the counter, /health/load), the admitted turns finish whole, and afterwards new requests are served again. The CPU's
speed decides nothing: the SLO and the margin are out of the way, only the slots count."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import websockets
from support import connect, errors_until_pong, next_json, running_gateway, slots_free, until
from voxgate.engine.qwen3tts.engine import Qwen3TTSEngine, create_engine
from voxgate.gateway.config import GatewayConfig
from voxgate.gateway.http.speech_ws import SPEECH_PROTOCOL
from voxgate.gateway.protocol import PROTOCOL
from voxgate.gateway.transport.uvicorn_server import BackgroundServer

SMALL = dict(device="cpu", dtype="fp32", greedy="true", row_buckets="1,2", prefill_buckets="32", max_slots="3",
             max_positions="200", max_rows="2", chunk_frames="2,4")  # two streams at once
CONFIG = dict(admission_margin=0.01, first_audio_slo_ms=600_000, text_stream_min_words=1, text_stream_min_wps=0.0)
TEXT = "Hello there, this is a test of the slots "  # no end yet: each turn holds its slot


@pytest.fixture(scope="module")
def server(tiny_ckpt: Callable[[str], Path]) -> Iterator[BackgroundServer]:
    with running_gateway(create_engine(model=str(tiny_ckpt("cv06")), **SMALL), GatewayConfig(**CONFIG)) as srv:
        yield srv


def _engine(server: BackgroundServer) -> Qwen3TTSEngine:
    return server.server.config.app.state.voxgate.engine


def _refused(server: BackgroundServer) -> dict[str, float]:
    prefix = "voxgate_admission_refusals_total{"
    lines = [line for line in httpx.get(server.http_url + "/metrics").text.splitlines() if line.startswith(prefix)]
    return {line.split('door="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1]) for line in lines
            if 'reason="slots"' in line}


@pytest.mark.slow
async def test_full_slots_refuse_at_every_door_and_the_admitted_turns_finish_whole(server: BackgroundServer) -> None:
    engine = _engine(server)
    ws, _ = await connect(server.ws_url, pacing={"mode": "asap"}, defaults={"voice": "ryan"})
    for context_id in ("a1", "a2"):
        await ws.send(json.dumps({"type": "text.append", "context_id": context_id, "text": TEXT}))
    assert await errors_until_pong(ws) == []
    await until(lambda: engine.runner.kv.num_free == 0, 60, "both slots held")

    speech = httpx.post(server.http_url + "/v1/audio/speech", json={"input": "Hi.", "response_format": "pcm"})
    assert speech.status_code == 503 and int(speech.headers["Retry-After"]) >= 1
    assert speech.json()["error"] == {"message": "the engine is full; retry later or elsewhere",
                                      "type": "server_error", "code": "engine_full", "param": None}
    async with websockets.connect(server.ws_url, subprotocols=[PROTOCOL]) as refused:
        error = await next_json(refused)
        assert error["code"] == "engine_full" and error["retry_after_ms"] >= 1
        await refused.wait_closed()
    assert refused.close_code == 1013
    speech_url = server.ws_url.replace("/v1/tts/ws", "/v1/audio/speech/ws")
    async with websockets.connect(speech_url, subprotocols=[SPEECH_PROTOCOL]) as refused:
        assert json.loads(await refused.recv())["error"]["code"] == "engine_full"
    await ws.send(json.dumps({"type": "text.append", "context_id": "a3", "text": TEXT}))
    [error] = await errors_until_pong(ws)
    assert error["code"] == "engine_full" and error["context_id"] == "a3" and error["retry_after_ms"] >= 1
    assert _refused(server) == {"http": 1, "ws_session": 1, "speech_ws": 1, "ws_context": 1}
    load = httpx.get(server.http_url + "/health/load").json()
    assert load["accepting"] is False and load["load"] == 1.0 and load["free_rows"] == 0

    for context_id in ("a1", "a2"):
        await ws.send(json.dumps({"type": "context.end", "context_id": context_id}))
    done = {}
    while len(done) < 2:
        message = await next_json(ws, timeout=120)  # generous: 2 shared cores
        assert message["type"] != "error", message
        if message["type"] == "context.done":
            done[message["context_id"]] = message
    assert all(d["usage"]["audio_ms"] > 0 and d["usage"]["chars"] == len(TEXT) for d in done.values())
    await ws.close()

    await slots_free(engine, 60)
    assert httpx.get(server.http_url + "/health/load").json()["accepting"] is True
    speech = httpx.post(server.http_url + "/v1/audio/speech", json={"input": "Hi.", "response_format": "pcm"},
                        timeout=120)
    assert speech.status_code == 200 and len(speech.content) > 0

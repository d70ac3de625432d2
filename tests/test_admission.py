"""Admission by deadline on the fake engine (issue 26.1): a device that makes 4x real time holds 4 streams at 1x; with a
quarter of it reserved for sessions already speaking, a fourth stream is let in only as such a session's new turn.
Every door refuses the rest at once (engine_full, Retry-After / retry_after_ms, the counter, /health/load), the
streams admitted finish whole, and once they have, new requests are admitted again. No timing is asserted: the
streams wait for their text, so the engine stays full until the test ends them."""

from __future__ import annotations

import json

import httpx
import pytest
import websockets
from support import connect, errors_until_pong, next_json, until
from voxgate.engine.fake import SAMPLE_RATE, FakeEngine, fake_duration_samples
from voxgate.gateway.config import GatewayConfig
from voxgate.gateway.http.speech_ws import SPEECH_PROTOCOL
from voxgate.gateway.protocol import PROTOCOL

TEXT = "one two three four "  # four words, then the context waits for more (its stream stays open)

# A context's stream opens on its first words and stays open until context.end; the SLO is out of the way (the
# loaded CI machine's timing must not decide), so the device's 4x is the only limit.
CONFIG = dict(admission_margin=1.0, admission_reserve=0.25, first_audio_slo_ms=600_000, text_stream_min_words=1,
              text_stream_min_wps=0.0)


def refusals(server, door: str) -> float:
    text = httpx.get(server.http_url + "/metrics").text
    prefix = f'voxgate_admission_refusals_total{{door="{door}",reason="realtime"}} '
    return sum(float(line[len(prefix):]) for line in text.splitlines() if line.startswith(prefix))


async def open_context(ws, context_id: str) -> None:
    await ws.send(json.dumps({"type": "text.append", "context_id": context_id, "text": TEXT}))


def assert_refused_over_http(server) -> None:
    response = httpx.post(server.http_url + "/v1/audio/speech",
                          json={"input": "hi", "voice": "tone-a", "response_format": "pcm"})
    assert response.status_code == 503
    assert response.json() == {"error": {"message": "the engine is full; retry later or elsewhere",
                                         "type": "server_error", "code": "engine_full", "param": None}}
    assert response.headers["Retry-After"].isdigit() and int(response.headers["Retry-After"]) >= 1


async def assert_refused_over_websockets(server) -> None:
    async with websockets.connect(server.ws_url, subprotocols=[PROTOCOL]) as ws:  # a new session
        error = await next_json(ws)
        assert error["code"] == "engine_full" and error["fatal"] and error["retry_after_ms"] >= 1
        await ws.wait_closed()
    assert ws.close_code == 1013
    speech_url = server.ws_url.replace("/v1/tts/ws", "/v1/audio/speech/ws")
    async with websockets.connect(speech_url, subprotocols=[SPEECH_PROTOCOL]) as ws:  # the speech WebSocket
        error = json.loads(await ws.recv())["error"]
        assert error["code"] == "engine_full" and error["type"] == "server_error" and error["retry_after_ms"] >= 1
        await ws.wait_closed()
    assert ws.close_code == 1013


async def finish(ws, context_ids: list[str]) -> dict[str, dict]:
    """End the contexts: their context.done messages (no error on the way)."""
    for context_id in context_ids:
        await ws.send(json.dumps({"type": "context.end", "context_id": context_id}))
    done = {}
    while len(done) < len(context_ids):
        message = await next_json(ws)
        assert message["type"] != "error", message
        if message["type"] == "context.done":
            done[message["context_id"]] = message
    return done


@pytest.mark.slow
async def test_a_full_engine_refuses_at_every_door_and_serves_what_it_admitted(gateway):
    engine = FakeEngine(device_rtf=4, first_chunk_ms=0, forecast=True)
    server = gateway(engine, GatewayConfig(**CONFIG))
    speaking, _ = await connect(server.ws_url, pacing={"mode": "asap"}, defaults={"voice": "tone-a"})
    await open_context(speaking, "a1")
    await until(lambda: engine.admission_forecast().streams == 2, what="a1's stream open")
    for context_id in ("a2", "a3"):  # 3 streams: 0.75 of the device, what a new session's stream may fill
        await open_context(speaking, context_id)
    assert await errors_until_pong(speaking) == []
    await until(lambda: engine.admission_forecast().streams == 4, what="three streams open")

    assert_refused_over_http(server)
    await assert_refused_over_websockets(server)
    load = httpx.get(server.http_url + "/health/load").json()
    assert load["accepting"] is False and load["load"] == 1.0

    await open_context(speaking, "a4")  # a turn of a session already speaking may use the reserve...
    assert await errors_until_pong(speaking) == []
    await open_context(speaking, "a5")  # ...but not past the device
    [refused] = await errors_until_pong(speaking)
    assert refused["code"] == "engine_full" and refused["context_id"] == "a5" and not refused["fatal"]
    assert refused["retry_after_ms"] >= 1
    assert [refusals(server, door) for door in ("ws_session", "ws_context", "http", "speech_ws")] == [1, 1, 1, 1]

    admitted = ["a1", "a2", "a3", "a4"]
    done = await finish(speaking, admitted)  # each spoke all of its text
    whole_ms = fake_duration_samples(TEXT) * 1000 // SAMPLE_RATE
    assert {k: d["usage"]["audio_ms"] for k, d in done.items()} == dict.fromkeys(admitted, whole_ms)

    await until(lambda: engine.admission_forecast().streams == 1, what="every stream closed")
    response = httpx.post(server.http_url + "/v1/audio/speech",
                          json={"input": "hi", "voice": "tone-a", "response_format": "pcm"})
    assert response.status_code == 200 and len(response.content) == 2 * fake_duration_samples("hi")
    other, _ = await connect(server.ws_url)
    assert httpx.get(server.http_url + "/health/load").json()["accepting"] is True
    await other.close()
    await speaking.close()


async def test_admission_off_admits_past_the_device(gateway):
    engine = FakeEngine(device_rtf=1, first_chunk_ms=0, forecast=True)
    server = gateway(engine, GatewayConfig(**CONFIG, admission="off"))
    ws, _ = await connect(server.ws_url, pacing={"mode": "asap"}, defaults={"voice": "tone-a"})
    for context_id in ("a1", "a2", "a3"):
        await open_context(ws, context_id)
    assert await errors_until_pong(ws) == []
    assert httpx.get(server.http_url + "/health/load").json()["accepting"] is True
    await ws.close()

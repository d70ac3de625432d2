"""Malformed input never reaches the internals (issue 13, point 6): each is answered as documented, the session
(or server) goes on, and a bystander keeps speaking."""

from __future__ import annotations

import asyncio
import json
import logging

import httpx
import pytest
import websockets
from raw import RawWebSocket
from support import bystander, connect, next_json
from voxgate.gateway.config import GatewayConfig
from voxgate.gateway.protocol import PROTOCOL

HUGE_INT = "9" * 5000  # past CPython's 4300-digit limit for int(str)
DEEP = "[" * 30_000 + "]" * 30_000  # far past any recursion limit, within max_message_bytes

# Raw text frames that must each get a non-fatal invalid_message, the session going on.
HOSTILE_MESSAGES = {
    "5000-digit integer": '{"type": "ping", "t_ms": ' + HUGE_INT + "}",
    "5000-digit position": '{"type": "playback", "played_pts": ' + HUGE_INT + "}",
    "integer past 2^53": '{"type": "playback", "played_pts": ' + str(2**62) + "}",
    "deeply nested JSON": '{"type": "ping", "t_ms": ' + DEEP + "}",
    "nesting in a nested object": '{"type": "playback", "played_pts": 0, "underruns": {"events": ' + DEEP + "}}",
    "NaN": '{"type": "ping", "t_ms": NaN}',
    "Infinity": '{"type": "ping", "t_ms": -Infinity}',
    "a number too big for a float": '{"type": "ping", "t_ms": 1e400}',
    "a lone surrogate": '{"type": "text.append", "context_id": "a", "text": "\\ud800 hello."}',
}


@pytest.mark.slow
async def test_hostile_messages_get_invalid_message_and_the_session_goes_on(gateway, fake_engine):
    server = gateway(engine=fake_engine(device_rtf=200))
    async with bystander(server.ws_url):
        ws, _ = await connect(server.ws_url)
        answers = {}
        for name, raw in HOSTILE_MESSAGES.items():
            await ws.send(raw)
            answers[name] = await next_json(ws)
        await ws.send(json.dumps({"type": "ping", "t_ms": 1.5}))
        pong = await next_json(ws)
        await ws.close()
    for name, answer in answers.items():
        assert answer["type"] == "error" and answer["code"] == "invalid_message" and not answer["fatal"], (name, answer)
    assert pong["type"] == "pong" and pong["t_ms"] == 1.5


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


async def test_invalid_utf8_closes_1007_without_a_traceback(gateway, fake_engine):
    server = gateway(engine=fake_engine(device_rtf=200))
    records = Records()
    logger = logging.getLogger("uvicorn.error")
    logger.addHandler(records)
    try:
        async with bystander(server.ws_url):
            ws = await asyncio.to_thread(RawWebSocket, server.host, server.port)
            ws.send_json({"type": "session.start"})
            assert (await asyncio.to_thread(ws.recv_json))["type"] == "session.started"
            ws.send_raw_text(b'{"type": "ping", "t_ms": "\xff\xfe"}')
            with pytest.raises(ConnectionError) as closed:
                await asyncio.to_thread(ws.recv_json)
            ws.close()
    finally:
        logger.removeHandler(records)
    assert closed.value.args[1] == 1007
    logged = records.records
    assert logged and all(r.exc_info is None for r in logged), [r.getMessage() for r in logged]
    assert any("1007" in r.getMessage() for r in logged)


@pytest.mark.slow
async def test_non_ascii_tokens_are_refused_not_crashed(gateway, fake_engine):
    server = gateway(engine=fake_engine(), config=GatewayConfig(auth_tokens=["s3cret"]))
    async with bystander(server.ws_url + "?token=s3cret"):
        ws = await websockets.connect(server.ws_url + "?token=%C3%BC%F0%9F%94%91", subprotocols=[PROTOCOL])
        refused = await next_json(ws)
        await ws.wait_closed()
        async with httpx.AsyncClient(base_url=server.http_url) as http:
            http_refused = await http.post("/v1/audio/speech", json={"input": "Hi."},
                                           headers={"Authorization": "Bearer s\xe9cr\xe8t".encode("latin-1")})
    assert refused["code"] == "unauthorized" and ws.close_code == 4001
    assert http_refused.status_code == 401


BAD_BODIES = {
    "5000-digit integer": ('{"input": "Hi.", "max_audio_ms": ' + HUGE_INT + "}").encode(),
    "deeply nested JSON": ('{"input": ' + DEEP + "}").encode(),
    "a lone surrogate": b'{"input": "Hello \\ud800 there."}',
    "invalid UTF-8": b'{"input": "Hello \xff there."}',
    "NaN": b'{"input": "Hi.", "speed": NaN}',
}


@pytest.mark.slow
async def test_malformed_bodies_get_400(gateway, fake_engine):
    server = gateway(engine=fake_engine(device_rtf=200))
    async with bystander(server.ws_url), httpx.AsyncClient(base_url=server.http_url) as http:
        answers = {name: await http.post("/v1/audio/speech", content=body,
                                         headers={"Content-Type": "application/json"})
                   for name, body in BAD_BODIES.items()}
    for name, answer in answers.items():
        assert answer.status_code == 400 and answer.json()["error"]["code"] in ("invalid_json", "invalid_type"), (
            name, answer.status_code, answer.text)
    metrics = httpx.get(server.http_url + "/metrics").text
    assert f'voxgate_speech_requests_total{{status="400"}} {len(BAD_BODIES)}.0' in metrics

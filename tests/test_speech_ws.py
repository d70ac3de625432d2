"""The speech WebSocket `/v1/audio/speech/ws` (gateway/http/speech_ws.py) beyond tts-bench's happy path (that one is
tests/test_ttsbench.py): one clear error per bad request, each followed by the close, and a cancel that stops the
engine. Real server, raw `websockets` client."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import websockets
from voxgate.engine.fake import fake_duration_samples
from voxgate.gateway.config import Limits

PATH = "/v1/audio/speech/ws"
PROTOCOL = "nari.speech.v1"


async def _open(server, start: dict[str, Any] | None, **connect: Any) -> Any:
    """A connection past session.created, with `start` sent (if any)."""
    ws = await websockets.connect(server.http_url.replace("http", "ws", 1) + PATH, subprotocols=[PROTOCOL],
                                  **connect)
    created = json.loads(await ws.recv())
    assert created["type"] == "session.created", created
    if start is not None:
        await ws.send(json.dumps({"type": "request.start", **start}))
    return ws


async def _refused(ws: Any) -> tuple[dict[str, Any], int]:
    """The error event that ends the connection, and the close code after it."""
    while True:
        message = await ws.recv()
        if isinstance(message, str) and json.loads(message)["type"] == "error":
            error = json.loads(message)["error"]
            break
    with pytest.raises(websockets.ConnectionClosed):
        await ws.recv()
    return error, ws.close_code


@pytest.mark.parametrize("start,code,param", [
    ({"voice": "en-us", "seed": 1}, "unknown_field", "seed"),
    ({"voice": "en-us", "input": "Hello."}, "unknown_field", "input"),
    ({"voice": "en-us", "response_format": "mp3"}, "unsupported_format", "response_format"),
    ({"voice": "en-us", "stream_format": "sse"}, "unsupported_field", "stream_format"),
    ({"voice": "en-us", "timestamps": "word"}, "unsupported_field", "timestamps"),
    ({"voice": "nobody"}, "voice_not_found", "voice"),
    ({"model": "another-model"}, "model_not_found", "model"),
])
async def test_bad_start_is_one_error_then_close(gateway, start: dict, code: str, param: str) -> None:
    ws = await _open(gateway(), start)
    error, close_code = await _refused(ws)
    assert (error["code"], error["param"], close_code) == (code, param, 1008), error


async def test_first_message_must_be_request_start(gateway) -> None:
    ws = await _open(gateway(), None)
    await ws.send(json.dumps({"type": "input_text.append", "sequence": 0, "text": "Hello"}))
    error, close_code = await _refused(ws)
    assert (error["code"], error["param"], close_code) == ("invalid_message", "type", 1008)


@pytest.mark.parametrize("second,code,param", [
    ({"type": "input_text.append", "sequence": 2, "text": "there."}, "invalid_sequence", "sequence"),
    ({"type": "input_text.append", "sequence": True, "text": "there."}, "invalid_sequence", "sequence"),
    ({"type": "input_text.end", "sequence": 0}, "invalid_sequence", "sequence"),
    ({"type": "input_text.append", "sequence": 1, "text": ""}, "invalid_value", "text"),
    ({"type": "input_text.append", "sequence": 1}, "invalid_value", "text"),
    ({"type": "session.start"}, "invalid_message", "type"),
])
async def test_bad_text_message_is_refused(gateway, second: dict, code: str, param: str) -> None:
    ws = await _open(gateway(), {"voice": "en-us"})
    assert json.loads(await ws.recv())["type"] == "request.configured"
    await ws.send(json.dumps({"type": "input_text.append", "sequence": 0, "text": "Hello "}))
    assert json.loads(await ws.recv()) == {"type": "input_text.ack", "event": "input_text.append", "sequence": 0}
    await ws.send(json.dumps(second))
    error, close_code = await _refused(ws)
    assert (error["code"], error["param"], close_code) == (code, param, 1008)


async def test_text_over_the_limit_is_refused(gateway) -> None:
    ws = await _open(gateway(limits=Limits(max_text_chars=20)), {"voice": "en-us"})
    await ws.recv()  # request.configured
    for sequence, word in enumerate(["Twelve chars ", "and nine more."]):
        await ws.send(json.dumps({"type": "input_text.append", "sequence": sequence, "text": word}))
    error, close_code = await _refused(ws)
    assert (error["code"], error["param"], close_code) == ("text_too_long", "text", 1008)
    assert "max_text_chars (20)" in error["message"]


async def test_unauthorized_without_a_token(gateway) -> None:
    server = gateway(auth_tokens=["secret"])
    ws = await websockets.connect(server.http_url.replace("http", "ws", 1) + PATH, subprotocols=[PROTOCOL])
    error, close_code = await _refused(ws)
    assert (error["code"], close_code) == ("unauthorized", 4001)
    ws = await _open(server, {"voice": "en-us"}, additional_headers={"Authorization": "Bearer secret"})
    assert json.loads(await ws.recv())["type"] == "request.configured"
    await ws.close()


async def test_cancel_stops_the_engine_and_closes_normally(gateway, fake_engine) -> None:
    engine = fake_engine(device_rtf=1.0, chunk_ms=100)  # as fast as it plays: 60 s of text takes a minute
    server = gateway(engine)
    ws = await _open(server, {"voice": "tone-a"})
    await ws.recv()  # request.configured
    text = "A long sentence that the fake engine speaks at the pace of playback. " * 40
    await ws.send(json.dumps({"type": "input_text.append", "sequence": 0, "text": text}))
    await ws.send(json.dumps({"type": "input_text.end", "sequence": 1}))
    while not isinstance(await ws.recv(), bytes):  # the acks, response.started, then audio
        pass
    await ws.send(json.dumps({"type": "response.cancel"}))
    with pytest.raises(websockets.ConnectionClosedOK):
        while True:
            await ws.recv()
    assert ws.close_code == 1000
    drain = server.server.config.app.state.voxgate.drain
    deadline = asyncio.get_running_loop().time() + 10
    while drain.http_streams and asyncio.get_running_loop().time() < deadline:  # the handler's cleanup (no event)
        await asyncio.sleep(0.01)
    assert drain.http_streams == 0
    request, chunks = engine.produced[-1]
    spoken = sum(len(c) for c in chunks)
    assert engine.streams[-1]._inner._cancelled and spoken < fake_duration_samples(request.text)  # cut midway

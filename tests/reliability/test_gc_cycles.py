"""No reference cycle on the request path: WebSocket sessions (contexts spoken and cancelled, bad messages, a fatal
protocol error, a refusal) and HTTP speech requests (streamed, refused as bad input) leave nothing for Python's
garbage collector; all they made is freed by reference counting as they end. A collector pass stops the event loop
and the engine loop alike, and its length grows with what it has to walk and free: under load one cycle per session
made passes of 20-80 ms (docs/benchmarks.md, "Garbage collector and loop settings").

The clients are synchronous (sockets and threads, no asyncio), so every asyncio object in the garbage is the
server's; the check counts the server's types only."""

from __future__ import annotations

import collections
import json
import time
from collections.abc import Iterator

import httpx
import pytest
from gc_support import connections_closed, server_garbage, wait_json
from voxgate.engine.fake import FakeEngine
from voxgate.gateway.config import GatewayConfig
from voxgate.gateway.protocol import PROTOCOL
from voxgate.gateway.transport.uvicorn_server import BackgroundServer
from websockets.sync.client import connect


def _session(url: str, pacing: str) -> None:
    with connect(url, subprotocols=[PROTOCOL], max_size=None) as ws:
        ws.send(json.dumps({"type": "session.start", "pacing": {"mode": pacing}, "defaults": {"voice": "tone-a"}}))
        assert wait_json(ws, "session.started")["type"] == "session.started"
        ws.send(json.dumps({"type": "text.append", "context_id": "a", "text": "Two words."}))
        ws.send(json.dumps({"type": "context.end", "context_id": "a"}))
        assert wait_json(ws, "context.done")["context_id"] == "a"
        ws.send(json.dumps({"type": "text.append", "context_id": "b", "text": "A longer turn to cut short. " * 4}))
        ws.send(json.dumps({"type": "context.cancel", "context_id": "b"}))
        assert wait_json(ws, "context.cancelled")["context_id"] == "b"
        ws.send("{not json")  # a bad message: an error, and the session goes on
        assert wait_json(ws, "error")["type"] == "error"
        ws.send(json.dumps({"type": "ping"}))
        assert wait_json(ws, "pong")["type"] == "pong"


def _fatal(url: str) -> None:
    with connect(url, subprotocols=[PROTOCOL]) as ws:
        ws.send(json.dumps({"type": "text.append", "context_id": "a", "text": "no session.start first"}))
        assert wait_json(ws, "error")["type"] == "error"


@pytest.fixture
def server(gateway, fake_engine) -> Iterator[BackgroundServer]:
    yield gateway(engine=fake_engine(device_rtf=200, chunk_ms=80), max_sessions=2)


@pytest.mark.slow
def test_websocket_sessions_leave_no_cycles(server: BackgroundServer) -> None:
    def sessions() -> None:
        for pacing in ("asap", "client_clock", "realtime"):
            _session(server.ws_url, pacing)
        _fatal(server.ws_url)
        with connect(server.ws_url, subprotocols=[PROTOCOL]) as one, connect(server.ws_url, subprotocols=[PROTOCOL]):
            one.send(json.dumps({"type": "session.start"}))
            with connect(server.ws_url, subprotocols=[PROTOCOL]) as third:  # over max_sessions: refused
                assert wait_json(third, "error")["code"] == "too_many_sessions"

    assert server_garbage(sessions, connections_closed(server)) == collections.Counter()


@pytest.mark.slow
def test_http_speech_requests_leave_no_cycles(server: BackgroundServer) -> None:
    def requests() -> None:
        with httpx.Client(base_url=server.http_url, timeout=10) as client:
            for fmt in ("pcm", "wav"):
                with client.stream("POST", "/v1/audio/speech",
                                   json={"input": "Hello there.", "voice": "tone-a", "response_format": fmt}) as r:
                    assert r.status_code == 200 and len(r.read()) > 0
            bad = client.post("/v1/audio/speech", json={"input": "Hi.", "voice": "nobody-at-all"})
            assert bad.status_code == 404  # an unknown voice

    assert server_garbage(requests, connections_closed(server)) == collections.Counter()


@pytest.mark.slow
def test_refusals_of_a_full_engine_leave_no_cycles(gateway) -> None:
    engine = FakeEngine(device_rtf=1, first_chunk_ms=0, forecast=True)  # one stream at 1x fills it
    server = gateway(engine, GatewayConfig(admission_margin=1.0, admission_reserve=0.25, first_audio_slo_ms=600_000,
                                           text_stream_min_words=1, text_stream_min_wps=0.0))

    def refusals() -> None:
        with connect(server.ws_url, subprotocols=[PROTOCOL], max_size=None) as speaking:
            speaking.send(json.dumps({"type": "session.start", "pacing": {"mode": "asap"},
                                      "defaults": {"voice": "tone-a"}}))
            wait_json(speaking, "session.started")
            speaking.send(json.dumps({"type": "text.append", "context_id": "a1", "text": "one two three four "}))
            deadline = time.monotonic() + 10
            while engine.admission_forecast().streams < 2:  # a1's stream is open (and waits for more text)
                assert time.monotonic() < deadline, "a1's stream did not open"
                time.sleep(0.02)
            for _ in range(2):
                response = httpx.post(server.http_url + "/v1/audio/speech",
                                      json={"input": "hi", "voice": "tone-a", "response_format": "pcm"})
                assert response.status_code == 503
            with connect(server.ws_url, subprotocols=[PROTOCOL]) as refused:
                assert wait_json(refused, "error")["code"] == "engine_full"
            speaking.send(json.dumps({"type": "text.append", "context_id": "a2", "text": "one two three four "}))
            assert wait_json(speaking, "error")["code"] == "engine_full"
            speaking.send(json.dumps({"type": "context.end", "context_id": "a1"}))
            assert wait_json(speaking, "context.done")["context_id"] == "a1"

    assert server_garbage(refusals, connections_closed(server)) == collections.Counter()

"""Any web page must not drive a local gateway (issue 13, point 4): Origin and Host allow-lists, JSON-only POSTs,
and protected /metrics and /health details."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from raw import RawWebSocket
from support import bystander
from voxgate.gateway.config import GatewayConfig

SPEECH = {"input": "Hello there.", "voice": "tone-a"}


def ws_status(server, **headers: str) -> int:
    """The HTTP status of a WebSocket handshake with these headers (101: accepted)."""
    ws = RawWebSocket(server.host, server.port, headers=headers)
    ws.close()
    return ws.status


@pytest.mark.slow
async def test_origins_and_hosts(gateway, fake_engine):
    engine = fake_engine(device_rtf=200)
    server = gateway(engine=engine, config=GatewayConfig(allowed_origins=["https://app.example.com"],
                                                        allowed_hosts=["voice.example.com"]))
    own = f"http://127.0.0.1:{server.port}"
    async with bystander(server.ws_url):
        checks = await asyncio.to_thread(lambda: {
            "no origin (not a browser)": ws_status(server),
            "same origin": ws_status(server, Origin=own),
            "a localhost page": ws_status(server, Origin="http://localhost:3000"),
            "a listed origin": ws_status(server, Origin="https://app.example.com"),
            "a foreign page": ws_status(server, Origin="https://evil.example"),
            "Origin: null": ws_status(server, Origin="null"),
            "a listed host": ws_status(server, Host="voice.example.com:8000"),
            "DNS rebinding": ws_status(server, Host="rebind.evil.example:8000", Origin="http://rebind.evil.example:8000"),
        })
        async with httpx.AsyncClient(base_url=server.http_url) as http:
            rebound = await http.get("/metrics", headers={"Host": "rebind.evil.example"})
            cross_site = await http.post("/v1/audio/speech", json=SPEECH, headers={"Origin": "https://evil.example"})
            form = await http.post("/v1/audio/speech", content=b'{"input": "Hello there."}',
                                   headers={"Content-Type": "text/plain"})
            same_site = await http.post("/v1/audio/speech", json=SPEECH, headers={"Origin": own})
    assert checks == {"no origin (not a browser)": 101, "same origin": 101, "a localhost page": 101,
                      "a listed origin": 101, "a foreign page": 403, "Origin: null": 403, "a listed host": 101,
                      "DNS rebinding": 421}
    assert rebound.status_code == 421 and rebound.json()["error"]["code"] == "host_not_allowed"
    assert cross_site.status_code == 403 and cross_site.json()["error"]["code"] == "origin_not_allowed"
    assert form.status_code == 415 and form.json()["error"]["code"] == "unsupported_media_type"
    assert same_site.status_code == 200 and len(same_site.content) > 0
    # Only the bystander's text and the same-site request reached the engine: nothing refused was synthesized.
    assert sorted({r.text for r, _ in engine.produced}) == ["A second session keeps speaking meanwhile.",
                                                           "Hello there."]
    metrics = httpx.get(server.http_url + "/metrics").text
    assert 'voxgate_errors_total{code="origin_not_allowed"} 3.0' in metrics
    assert 'voxgate_speech_requests_total{status="415"} 1.0' in metrics


@pytest.mark.parametrize("protect", [False, True])
async def test_protected_metrics_and_health_details(gateway, fake_engine, protect):
    server = gateway(engine=fake_engine(), config=GatewayConfig(auth_tokens=["s3cret"], protect_metrics=protect))
    async with httpx.AsyncClient(base_url=server.http_url) as http:
        anonymous = (await http.get("/metrics")).status_code, (await http.get("/health")).json()
        bearer = {"Authorization": "Bearer s3cret"}
        known = (await http.get("/metrics", headers=bearer)).status_code, (await http.get("/health", headers=bearer))
    if protect:
        assert anonymous == (401, {"status": "ok"})
    else:
        assert anonymous[0] == 200 and anonymous[1]["engine"] == "fake"
    assert known[0] == 200 and known[1].json()["engine_info"]["name"] == "fake"


def test_protect_metrics_needs_a_token():
    with pytest.raises(ValueError, match="protect_metrics needs auth_tokens"):
        GatewayConfig(protect_metrics=True)

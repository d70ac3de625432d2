"""Metrics that tell the truth (issue 13, point 7, the gateway's side): internal errors are counted, and every
POST /v1/audio/speech status appears in voxgate_speech_requests_total, 400 and 500 included."""

from __future__ import annotations

import asyncio
import inspect

import httpx
import pytest
import websockets
from support import RecordingEngine, bystander, next_json
from voxgate.engine.fake import FakeEngine
from voxgate.gateway.protocol import PROTOCOL


class BrokenVoices(RecordingEngine):
    """An engine bug on demand, once armed: listing the voices for a new session's session.started raises, and so
    does HTTP speech's default voice. The bystander's contexts (which resolve their voice against the same list)
    are spared, so only the new session and the request fail."""

    armed = False

    def voices(self) -> list:
        if self.armed and any(f.function == "_on_SessionStart" for f in inspect.stack()[1:4]):
            raise RuntimeError("an engine bug")
        return super().voices()

    def default_voice(self) -> str | None:
        if self.armed:
            raise RuntimeError("an engine bug")
        return super().default_voice()


def counter(text: str, line: str) -> float:
    value = next((ln.rsplit(" ", 1)[1] for ln in text.splitlines() if ln.startswith(line + " ")), "0")
    return float(value)


@pytest.mark.slow
async def test_internal_errors_and_every_status_are_counted(gateway):
    engine = BrokenVoices(FakeEngine(device_rtf=200))
    server = gateway(engine=engine)
    async with bystander(server.ws_url), httpx.AsyncClient(base_url=server.http_url) as http:
        engine.armed = True
        ws = await websockets.connect(server.ws_url, subprotocols=[PROTOCOL])
        await ws.send('{"type": "session.start"}')  # session.started lists the voices: the engine fails
        error = await next_json(ws)
        await ws.wait_closed()
        failed = await http.post("/v1/audio/speech", json={"input": "Hi."})
        bad = await http.post("/v1/audio/speech", json={"input": "Hi.", "stream": "yes"})
        engine.armed = False
        ok = await http.post("/v1/audio/speech", json={"input": "Hi."})
        await asyncio.sleep(0)
        metrics = (await http.get("/metrics")).text
    assert error["code"] == "internal_error" and error["fatal"] and ws.close_code == 1011
    assert failed.status_code == 500 and failed.json()["error"]["code"] == "internal_error"
    assert bad.status_code == 400 and ok.status_code == 200
    assert counter(metrics, 'voxgate_errors_total{code="internal_error"}') == 2
    for status in ("200", "400", "500"):
        assert counter(metrics, f'voxgate_speech_requests_total{{status="{status}"}}') == 1, status


async def test_speech_requests_count_only_speech(gateway):
    """POST /v1/voices is counted in its own family, never in voxgate_speech_requests_total (issue 23.2)."""
    server = gateway(engine=FakeEngine(device_rtf=200))
    async with httpx.AsyncClient(base_url=server.http_url) as http:
        upload = await http.post("/v1/voices", content=b"RIFF....", headers={"Content-Type": "audio/wav"})
        ok = await http.post("/v1/audio/speech", json={"input": "Hi."})
        metrics = (await http.get("/metrics")).text
    assert upload.status_code == 501 and upload.json()["error"]["code"] == "voice_uploads_disabled"
    assert ok.status_code == 200
    speech = [ln for ln in metrics.splitlines() if ln.startswith("voxgate_speech_requests_total{")]
    assert speech == ['voxgate_speech_requests_total{status="200"} 1.0'], speech
    assert counter(metrics, 'voxgate_voice_uploads_total{status="501"}') == 1

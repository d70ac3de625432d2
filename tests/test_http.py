"""HTTP endpoints on a real server: OpenAI-shaped speech (streamed PCM and WAV), voices, health, metrics."""

from __future__ import annotations

import struct

import httpx
import numpy as np
import pytest
from voxgate.gateway.config import Limits


def test_speech_streams_the_engine_pcm(gateway):
    server = gateway()
    body = {"model": "voxgate", "input": "Hello there. Streaming speech over HTTP.", "voice": "en-us",
            "response_format": "pcm", "stream": True}
    with httpx.stream("POST", server.http_url + "/v1/audio/speech", json=body, timeout=30) as response:
        assert response.status_code == 200
        assert response.headers["content-type"] == "audio/pcm"
        assert response.headers["x-sample-rate"] == "24000"
        data = b"".join(response.iter_bytes())
    produced = server.server.config.app.state.voxgate.engine.audio_for()
    assert np.array_equal(np.frombuffer(data, "<i2"), produced) and len(produced) > 24000


def test_speech_wav_open_ended_and_complete(gateway):
    server = gateway()
    body = {"model": "voxgate", "input": "A short WAV.", "response_format": "wav"}
    streamed = httpx.post(server.http_url + "/v1/audio/speech", json=body, timeout=30)
    assert streamed.status_code == 200 and streamed.headers["content-type"] == "audio/wav"
    head = streamed.content[:44]
    assert head[:4] == b"RIFF" and head[8:16] == b"WAVEfmt " and head[36:40] == b"data"
    assert struct.unpack("<I", head[4:8])[0] == 0xFFFFFFFF == struct.unpack("<I", head[40:44])[0]
    assert struct.unpack("<HHI", head[20:28]) == (1, 1, 24000)
    whole = httpx.post(server.http_url + "/v1/audio/speech", json={**body, "stream": False}, timeout=30)
    assert struct.unpack("<I", whole.content[40:44])[0] == len(whole.content) - 44
    assert int(whole.headers["content-length"]) == len(whole.content)


def test_speech_length_budget(gateway):
    server = gateway()
    body = {"input": "This text would take several seconds to say out loud.", "max_audio_ms": 500,
            "response_format": "pcm"}
    response = httpx.post(server.http_url + "/v1/audio/speech", json=body, timeout=30)
    assert len(response.content) == 500 * 24 * 2


@pytest.mark.parametrize("body,status,code", [
    ({"voice": "en-us"}, 400, "missing_input"),
    ({"input": "hi", "response_format": "ogg"}, 400, "unsupported_format"),
    ({"input": "hi", "voice": "nobody"}, 404, "voice_not_found"),
    ({"input": "hi", "stream": "yes"}, 400, "invalid_type"),
    ({"input": "hi", "colour": "blue"}, 400, "unknown_field"),
    ({"input": "x" * 101}, 413, "text_too_long"),
])
def test_speech_errors(gateway, body, status, code):
    server = gateway(limits=Limits(max_text_chars=100))
    response = httpx.post(server.http_url + "/v1/audio/speech", json=body, timeout=10)
    assert response.status_code == status
    assert response.json()["error"]["code"] == code


def test_speech_rejects_non_json(gateway):
    server = gateway()
    response = httpx.post(server.http_url + "/v1/audio/speech", content=b"{oops", timeout=10,
                          headers={"Content-Type": "application/json"})
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_json"


@pytest.mark.slow
def test_voices_health_metrics(gateway):
    server = gateway()
    voices = httpx.get(server.http_url + "/v1/voices").json()
    assert voices["default"] == "en-us"
    assert any(v["id"] == "en-us" for v in voices["voices"]) and len(voices["voices"]) > 50
    health = httpx.get(server.http_url + "/health").json()
    assert health == {"status": "ok", "engine": "espeak", "engine_info": health["engine_info"], "sessions": 0}
    assert health["engine_info"]["name"] == "espeak" and health["engine_info"]["sample_rate"] == 24000
    httpx.post(server.http_url + "/v1/audio/speech", json={"input": "Count me."}, timeout=30)
    text = httpx.get(server.http_url + "/metrics").text
    for name in ("voxgate_sessions_open", "voxgate_contexts_active", "voxgate_first_audio_seconds_bucket",
                 "voxgate_stall_events_total", "voxgate_audio_bytes_out_total", "voxgate_engine_queue_depth",
                 "voxgate_engine_gc_pause_seconds"):
        assert name in text, name
    assert 'voxgate_first_audio_seconds_count{endpoint="http"} 1.0' in text


def test_demo_page_is_served(gateway):
    server = gateway()
    response = httpx.get(server.http_url + "/")
    assert response.status_code == 200 and "<html" in response.text.lower()
    assert httpx.get(server.http_url + "/__init__.py").status_code == 404

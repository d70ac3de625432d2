"""vLLM-Omni's documented Qwen3-TTS request against the qwen3tts engine (tiny 1.7B CustomVoice checkpoint, CPU),
streamed as PCM; the fields it honours reach the engine, and the default voice follows the language."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from support import RecordingEngine, cpu_loop_config, running_gateway
from voxgate.engine.qwen3tts.engine import create_engine
from voxgate.gateway.transport.uvicorn_server import BackgroundServer

SMALL = dict(device="cpu", dtype="fp32", greedy="true", row_buckets="1,2,4", prefill_buckets="64", max_slots="5",
             max_positions="400", max_rows="4", chunk_frames="1,2,4")


@pytest.fixture(scope="module")
def server(tiny_ckpt: Callable[[str], Path]) -> Iterator[BackgroundServer]:
    engine = RecordingEngine(create_engine(model=str(tiny_ckpt("cv17")), **SMALL))
    # A synthetic checkpoint lives in a temporary directory: the Hub name comes from its config.
    with running_gateway(engine, cpu_loop_config()) as srv:
        engine.supports_instruct = engine.inner.supports_instruct  # known once the checkpoint is loaded
        yield srv


@pytest.mark.slow
def test_vllm_omni_customvoice_request_streams_pcm(server: BackgroundServer) -> None:
    engine: RecordingEngine = server.server.config.app.state.voxgate.engine
    body = {"model": "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice", "input": "I am so excited!", "voice": "vivian",
            "language": "English", "instructions": "Speak with great enthusiasm", "task_type": "CustomVoice",
            "max_new_tokens": 12, "non_streaming_mode": True, "initial_codec_chunk_frames": 1,
            "response_format": "pcm", "stream_format": "audio"}
    with httpx.stream("POST", server.http_url + "/v1/audio/speech", json=body, timeout=120) as response:
        assert response.status_code == 200, response.read()
        data = b"".join(response.iter_bytes())
    request, chunks = engine.produced[-1]
    assert (request.voice, request.language, request.instruct) == ("vivian", "english", "Speak with great enthusiasm")
    assert np.array_equal(np.frombuffer(data, "<i2"), np.concatenate(chunks))
    assert 0 < len(data) <= 12 * 1920 * 2


@pytest.mark.parametrize("extra,param", [({"task_type": "VoiceDesign"}, "task_type"),
                                         ({"initial_codec_chunk_frames": 4}, "initial_codec_chunk_frames")])
def test_fields_this_checkpoint_cannot_honour(server: BackgroundServer, extra: dict, param: str) -> None:
    body = {"input": "Hello.", "voice": "ryan", "response_format": "pcm", **extra}
    response = httpx.post(server.http_url + "/v1/audio/speech", json=body, timeout=60)
    assert response.status_code == 400 and response.json()["error"]["param"] == param


@pytest.mark.parametrize("text,language,speaker", [("Hello there.", "English", "ryan"), ("Hello there.", None, "ryan"),
                                                   ("你好。", None, "vivian"), ("こんにちは。", "auto", "ono_anna")])
def test_default_voice_follows_the_language(server: BackgroundServer, text: str, language: str | None,
                                            speaker: str) -> None:
    engine: RecordingEngine = server.server.config.app.state.voxgate.engine
    body = {"input": text, "response_format": "pcm", "max_new_tokens": 4, "language": language}
    response = httpx.post(server.http_url + "/v1/audio/speech", json=body, timeout=60)
    assert response.status_code == 200
    assert engine.inner.voice_for(text, (language or "auto").lower()) == speaker

"""`model` as users write it, on a served Qwen3-TTS checkpoint (tiny 0.6B CustomVoice, CPU) whose folder carries
another name: its official repo id (known from its config), the folder as given, `served_model_name`; a model that
is not served stays 404, and GET /v1/models lists them all."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from support import cpu_loop_config, running_gateway
from voxgate.engine.qwen3tts.engine import create_engine
from voxgate.gateway.transport.uvicorn_server import BackgroundServer

SMALL = dict(device="cpu", dtype="fp32", greedy="true", warmup="false", row_buckets="1,2", prefill_buckets="64",
             max_slots="3", max_positions="200", max_rows="2", chunk_frames="2")
OFFICIAL = "Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice"


@pytest.fixture(scope="module")
def checkpoint(tiny_ckpt: Callable[[str], Path]) -> Path:
    path = tiny_ckpt("cv06")
    assert path.name != OFFICIAL.split("/")[1]  # the folder does not tell what it holds
    return path


@pytest.fixture(scope="module")
def server(checkpoint: Path) -> Iterator[BackgroundServer]:
    engine = create_engine(model=str(checkpoint), **SMALL)
    with running_gateway(engine, cpu_loop_config(served_model_name=["qwen3-tts", "my-voice"])) as srv:
        yield srv


def _speech(server: BackgroundServer, model: str) -> httpx.Response:
    body = {"model": model, "input": "Hello.", "voice": "ryan", "response_format": "pcm", "max_new_tokens": 2}
    return httpx.post(server.http_url + "/v1/audio/speech", json=body, timeout=60)


@pytest.mark.slow
def test_models_lists_every_name(server: BackgroundServer, checkpoint: Path) -> None:
    listed = [m["id"] for m in httpx.get(server.http_url + "/v1/models", timeout=10).json()["data"]]
    assert listed == ["qwen3-tts", "my-voice", "voxgate", "qwen3tts", str(checkpoint), checkpoint.name, OFFICIAL,
                      "tts-1", "tts-1-hd", "gpt-4o-mini-tts", "gpt-4o-mini-tts-2025-12-15"]


@pytest.mark.parametrize("model", [OFFICIAL, OFFICIAL.lower(), "qwen3-tts", "my-voice", "tts-1", "voxgate"])
def test_names_users_write_are_served(server: BackgroundServer, model: str) -> None:
    response = _speech(server, model)
    assert response.status_code == 200, response.text
    assert len(response.content) == 2 * 1920 * 2


def test_the_folder_as_given_is_served(server: BackgroundServer, checkpoint: Path) -> None:
    for model in (str(checkpoint), checkpoint.name):
        assert _speech(server, model).status_code == 200


@pytest.mark.parametrize("model", ["Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice", "Qwen/Qwen3-TTS-12Hz-0.6B-Base",
                                   "qwen3-tts-2", "gpt-5"])
def test_a_model_not_served_is_404(server: BackgroundServer, model: str) -> None:
    response = _speech(server, model)
    assert response.status_code == 404
    error = response.json()["error"]
    assert error["code"] == "model_not_found" and error["param"] == "model" and OFFICIAL in error["message"]

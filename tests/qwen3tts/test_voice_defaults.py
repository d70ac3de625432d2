"""The voice rule on Qwen3-TTS checkpoints (tiny, CPU): English text gets an English speaker (the default, /v1/voices'
`default`, `alloy`, a language given as an ISO code); a Base checkpoint without an uploaded voice answers one error
telling how to upload one, and VoiceDesign one asking for the instruct, over the WebSocket and HTTP alike."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import voxgate.client
from support import RecordingEngine, connect, cpu_loop_config, next_json, running_gateway
from voxgate.engine.qwen3tts.engine import NATIVE, create_engine
from voxgate.gateway.transport.uvicorn_server import BackgroundServer

from .test_openai_shapes import SMALL

MAX_AUDIO_MS = 320  # 4 frames: random weights rarely sample EOS, so the budget fixes the length


@pytest.fixture(scope="module")
def custom_voice(tiny_ckpt: Callable[[str], Path]) -> Iterator[BackgroundServer]:
    with running_gateway(RecordingEngine(create_engine(model=str(tiny_ckpt("cv06")), **SMALL))) as srv:
        yield srv


@pytest.fixture(scope="module")
def base(tiny_ckpt: Callable[[str], Path]) -> Iterator[BackgroundServer]:
    with running_gateway(create_engine(model=str(tiny_ckpt("base06")), **SMALL), cpu_loop_config()) as srv:
        yield srv


@pytest.fixture(scope="module")
def voice_design(tiny_ckpt: Callable[[str], Path]) -> Iterator[BackgroundServer]:
    with running_gateway(create_engine(model=str(tiny_ckpt("vd17")), **SMALL), cpu_loop_config()) as srv:
        yield srv


def test_the_english_speakers_are_those_of_the_real_checkpoints(shared: Path) -> None:
    """Ryan and Aiden are English (the model cards); every CustomVoice checkpoint has both."""
    for name in ("Qwen3-TTS-12Hz-0.6B-CustomVoice", "Qwen3-TTS-12Hz-1.7B-CustomVoice"):
        speakers = json.loads((shared / "checkpoints" / name / "config.json").read_text())["talker_config"]["spk_id"]
        assert {s for s in speakers if NATIVE.get(s) == "en"} == {"ryan", "aiden"}


@pytest.mark.slow
async def test_english_text_gets_an_english_speaker(custom_voice: BackgroundServer) -> None:
    engine: RecordingEngine = custom_voice.server.config.app.state.voxgate.engine
    listed = httpx.get(custom_voice.http_url + "/v1/voices").json()
    english = {v["id"] for v in listed["voices"] if v["languages"] == ["en"]}
    assert english == {"ryan", "aiden"} and listed["default"] == "ryan" and listed["aliases"]["alloy"] == "ryan"
    response = httpx.post(custom_voice.http_url + "/v1/audio/speech", timeout=120,
                          json={"input": "Hello there.", "voice": "alloy", "max_new_tokens": 4,
                                "response_format": "pcm"})
    assert response.status_code == 200 and len(response.content) > 0, response.text
    async with voxgate.client.connect(custom_voice.ws_url, voice="alloy") as tts:
        assert tts.session["aliases"]["alloy"] == "ryan"
        assert len(await tts.speak("Hello there.", max_audio_ms=MAX_AUDIO_MS).audio()) > 0
    async with voxgate.client.connect(custom_voice.ws_url, language="en") as tts:  # no voice: the engine's pick
        assert len(await tts.speak("Hello there.", max_audio_ms=MAX_AUDIO_MS).audio()) > 0
    requests = [request for request, _ in engine.produced[-3:]]
    assert [(r.voice, r.language) for r in requests] == [("ryan", None), ("ryan", None), (None, "english")]
    assert engine.inner.voice_for(requests[-1].text, requests[-1].language) == "ryan"


@pytest.mark.slow
async def test_base_without_a_voice_says_how_to_upload_one(base: BackgroundServer) -> None:
    listed = httpx.get(base.http_url + "/v1/voices").json()
    assert listed["voices"] == [] and listed["default"] is None
    ws, started = await connect(base.ws_url, pacing={"mode": "asap"})
    assert started["voices"] == [] and started["aliases"] == {}
    await ws.send(json.dumps({"type": "text.append", "context_id": "c", "text": "Hello there."}))
    error = await next_json(ws, timeout=30)
    assert (error["type"], error["code"], error["context_id"]) == ("error", "voice_required", "c")
    assert "POST /v1/voices" in error["message"]
    await ws.send(json.dumps({"type": "ping", "t_ms": 1}))  # the session goes on
    assert (await next_json(ws))["type"] == "pong"
    await ws.close()
    for body, status, code in (({}, 400, "voice_required"), ({"voice": "alloy"}, 404, "voice_not_found")):
        response = httpx.post(base.http_url + "/v1/audio/speech", timeout=60, json={"input": "Hello.", **body})
        error = response.json()["error"]
        assert (response.status_code, error["code"], error["param"]) == (status, code, "voice"), error
        assert "POST /v1/voices" in error["message"]


@pytest.mark.slow
async def test_voice_design_asks_for_the_instruct_at_every_door(voice_design: BackgroundServer) -> None:
    ws, _ = await connect(voice_design.ws_url, pacing={"mode": "asap"})
    await ws.send(json.dumps({"type": "text.append", "context_id": "c", "text": "Hello there."}))
    error = await next_json(ws, timeout=30)
    assert (error["type"], error["code"], error["context_id"]) == ("error", "missing_field", "c")
    assert error["message"].startswith("instruct: ") and "description of the voice" in error["message"]
    await ws.close()
    async with voxgate.client.connect(voice_design.ws_url, instruct="A calm, low voice.") as tts:  # the default's
        assert len(await tts.speak("Hello there.", max_audio_ms=MAX_AUDIO_MS).audio()) > 0
    response = httpx.post(voice_design.http_url + "/v1/audio/speech", timeout=60, json={"input": "Hello."})
    error = response.json()["error"]
    assert (response.status_code, error["code"], error["param"]) == (400, "missing_field", "instructions"), error

"""nari-labs tts-bench with every default (model `Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice`, voice `Ryan`, language
`English`) against the qwen3tts engine on a tiny 1.7B CustomVoice checkpoint (CPU) whose folder has another name,
served as `voxgate serve` would serve it: no model alias configured. Each of its five HTTP targets' exact request
(tests/ttsbench.py) and its WebSocket mode get the PCM their reader accepts, equal to what the engine made."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import websockets
from support import RecordingEngine, cpu_loop_config, running_gateway
from ttsbench import DEFAULTS, TARGETS, body_for, post_like_ttsbench, preflight, speak_over_ws
from voxgate.engine.qwen3tts.engine import create_engine
from voxgate.gateway.config import Limits
from voxgate.gateway.transport.uvicorn_server import BackgroundServer

from .test_openai_shapes import SMALL

TEXT = "Hello there. This is a short benchmark prompt for the tiny checkpoint."
# A random tiny checkpoint may never say its end: the server's audio limit ends each request after 2 s (25 frames).
CONFIG = cpu_loop_config(limits=Limits(max_context_audio_s=2.0))


@pytest.fixture(scope="module")
def server(tiny_ckpt: Callable[[str], Path]) -> Iterator[BackgroundServer]:
    engine = RecordingEngine(create_engine(model=str(tiny_ckpt("cv17")), **SMALL))
    with running_gateway(engine, CONFIG) as srv:
        yield srv


def _engine(server: BackgroundServer) -> RecordingEngine:
    return server.server.config.app.state.voxgate.engine


@pytest.mark.slow
@pytest.mark.parametrize("name", list(TARGETS))
async def test_http_target_with_defaults_gets_pcm(server: BackgroundServer, name: str) -> None:
    target = TARGETS[name]
    engine = _engine(server)
    before = len(engine.produced)
    assert await preflight(server.http_url) == 200
    answer = await post_like_ttsbench(server.http_url, target, body_for(target, TEXT, **DEFAULTS))
    assert answer.status == 200, answer.describe()
    assert answer.content_type in target.content_types, answer.describe()
    if target.rate_header is not None:
        assert answer.headers.get(target.rate_header) == "24000"
    requests = engine.produced[before:]
    # The engine gets its own name of the language (the voice rule reads "English", "en", "en-US" alike).
    assert {r.voice for r, _ in requests} == {"ryan"} and {r.language for r, _ in requests} == {"english"}
    made = np.concatenate([c for _, chunks in requests for c in chunks])
    assert len(made) > 0 and np.array_equal(answer.pcm, made)


@pytest.mark.slow
async def test_websocket_mode_with_defaults_gets_pcm(server: BackgroundServer) -> None:
    engine = _engine(server)
    before = len(engine.produced)
    assert await preflight(server.http_url) == 200
    result = await speak_over_ws(server.http_url, TEXT, dict(DEFAULTS, response_format="pcm"))
    requests = engine.produced[before:]
    assert {r.voice for r, _ in requests} == {"ryan"}
    made = np.concatenate([c for _, chunks in requests for c in chunks])
    assert len(made) > 0 and np.array_equal(result.pcm, made)
    assert result.close_code == 1000


async def test_websocket_language_refusal_is_one_error(server: BackgroundServer) -> None:
    """A language the engine does not speak is refused at `request.start` by the voice rule, before any text: one
    error naming the field, and the close is 1008 (the client's fault, as HTTP's 400 for it), not 1011."""
    url = server.http_url.replace("http", "ws", 1) + "/v1/audio/speech/ws"
    async with websockets.connect(url, subprotocols=["nari.speech.v1"]) as ws:
        assert json.loads(await ws.recv())["type"] == "session.created"
        await ws.send(json.dumps({"type": "request.start", "voice": "Ryan", "language": "Klingon"}))
        events = []
        with pytest.raises(websockets.ConnectionClosedError):
            while True:
                message = await ws.recv()
                if isinstance(message, str):
                    events.append(json.loads(message))
    assert [e["type"] for e in events] == ["error"], events
    assert events[0]["error"]["code"] == "language_not_supported" and events[0]["error"]["param"] == "language"
    assert ws.close_code == 1008

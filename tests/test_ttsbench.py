"""nari-labs tts-bench against a real gateway on the espeak engine (issue 24): each of its five HTTP targets' exact
request (tests/ttsbench.py holds the table, read from tts-bench's source) and its WebSocket mode, with `model` and
`voice` naming what espeak serves. Each gets 200 (101 for the socket) and the PCM its reader accepts, equal to what
the engine made."""

from __future__ import annotations

import numpy as np
import pytest
from ttsbench import TARGETS, body_for, post_like_ttsbench, preflight, speak_over_ws

TEXT = "The birch canoe slid on the smooth planks. Glue the sheet to the dark blue background."
ESPEAK = {"model": "espeak", "voice": "en-us", "language": "English"}


@pytest.mark.parametrize("name", list(TARGETS))
async def test_http_target_gets_pcm(gateway, name: str) -> None:
    server = gateway()
    target = TARGETS[name]
    assert await preflight(server.http_url) == 200
    answer = await post_like_ttsbench(server.http_url, target, body_for(target, TEXT, **ESPEAK))
    assert answer.status == 200, answer.describe()
    assert answer.content_type in target.content_types, answer.describe()
    if target.rate_header is not None:
        assert answer.headers.get(target.rate_header) == "24000"
    engine = server.server.config.app.state.voxgate.engine
    made = engine.audio_for()
    assert len(made) > 24_000  # over a second of speech
    assert np.array_equal(answer.pcm, made)


async def test_websocket_mode_gets_pcm(gateway) -> None:
    server = gateway()
    assert await preflight(server.http_url) == 200
    result = await speak_over_ws(server.http_url, TEXT, dict(ESPEAK, response_format="pcm"))
    engine = server.server.config.app.state.voxgate.engine
    made = engine.audio_for()
    assert len(made) > 24_000
    assert np.array_equal(result.pcm, made)
    assert result.close_code == 1000
    kinds = [e.get("type", "binary") for e in result.events]
    assert kinds.count("response.started") == kinds.count("response.done") == 1
    assert kinds.index("response.started") < kinds.index("binary") and kinds[-1] == "response.done"
    assert " ".join(r.request.text.strip() for r in engine.streams) == TEXT  # every word, in order, by sentence

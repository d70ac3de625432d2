"""One voice rule for every door (gateway/voices/voice_rule.py): OpenAI names, case-insensitive ids and languages as
names, ISO 639 codes or BCP-47 tags work alike over the WebSocket (SDK, raw) and HTTP, on espeak and the test-tone
engine; a language nobody speaks is one error naming the field."""

from __future__ import annotations

import httpx
import pytest
import voxgate.client
from support import connect, next_json
from voxgate.client import VoxgateError
from voxgate.gateway.voices.languages import Language, LanguageError, parse_language

LANGUAGES = [("en", "en-us"), ("eng", "en-us"), ("en-US", "en-us"), ("en_GB", "en-gb"), ("English", "en-us"),
             ("zh-Hans", "cmn"), ("zh", "cmn"), ("fr", "fr-fr"), ("pt-BR", "pt-br"), ("deu", "de")]


def test_languages_are_read_in_every_form() -> None:
    assert parse_language("en-US") == Language("en-us", "english")
    assert parse_language("eng") == parse_language("English") == Language("en", "english")
    assert parse_language("zh-Hans") == Language("zh-hans", "chinese") and parse_language("cmn").tag == "zh"
    assert parse_language("pt_BR") == Language("pt-br", "portuguese")
    assert parse_language("haw") == Language("haw", "")  # not in the table: the engine decides
    assert parse_language("auto") is None and parse_language("") is None
    with pytest.raises(LanguageError, match="BCP-47"):
        parse_language("Klingon")


async def test_alloy_speaks_over_the_websocket_through_the_sdk(gateway, fake_engine):
    engine = fake_engine(device_rtf=200)
    server = gateway(engine=engine)
    async with voxgate.client.connect(server.ws_url, voice="alloy") as tts:
        assert tts.session["aliases"]["alloy"] == "tone-a" and tts.session["defaults"]["voice"] == "tone-a"
        assert len(await tts.speak("Hello there.").audio()) > 0
        assert len(await tts.speak("Hello again.", voice="ASH").audio()) > 0  # per context, in any case
    assert [r.voice for r, _ in engine.produced] == ["tone-a", "tone-b"]


@pytest.mark.parametrize("language,espeak_voice", LANGUAGES)
async def test_a_language_without_a_voice_speaks_over_ws_and_http(gateway, language, espeak_voice):
    server = gateway()
    engine = server.server.config.app.state.voxgate.engine
    async with voxgate.client.connect(server.ws_url, language=language) as tts:
        assert tts.session["defaults"]["language"] == espeak_voice
        assert len(await tts.speak("Hello.").audio()) > 0
    async with voxgate.client.connect(server.ws_url) as tts:  # per context
        assert len(await tts.speak("Hello.", language=language).audio()) > 0
    response = httpx.post(server.http_url + "/v1/audio/speech", timeout=30,
                          json={"input": "Hello.", "language": language, "response_format": "pcm"})
    assert response.status_code == 200 and len(response.content) > 0, response.text
    assert [(r.voice, r.language) for r, _ in engine.produced] == [(None, espeak_voice)] * 3


@pytest.mark.parametrize("language,why", [("Klingon", "BCP-47"), ("tlh", "does not speak")])
async def test_an_unknown_language_is_one_error_naming_the_field(gateway, language, why):
    server = gateway()
    ws, _ = await connect(server.ws_url)
    await ws.send(f'{{"type": "context.open", "context_id": "c", "language": "{language}"}}')
    error = await next_json(ws)
    assert (error["code"], error["context_id"], error["fatal"]) == ("language_not_supported", "c", False)
    assert error["message"].startswith("language: ") and why in error["message"]
    await ws.send('{"type": "text.append", "context_id": "d", "text": "Still here."}')  # the session goes on
    assert (await next_json(ws))["type"] == "context.started"
    await ws.close()
    with pytest.raises(VoxgateError) as refused:
        async with voxgate.client.connect(server.ws_url, language=language):
            pass
    assert refused.value.code == "language_not_supported"
    assert refused.value.message.startswith("defaults.language: ")
    response = httpx.post(server.http_url + "/v1/audio/speech", json={"input": "Hi.", "language": language})
    error = response.json()["error"]
    assert (response.status_code, error["code"], error["param"]) == (400, "language_not_supported", "language")

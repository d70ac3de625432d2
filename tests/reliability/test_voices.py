"""Voice names are normalised once (issue 13, point 9): a name the gateway accepts works in every context and over
HTTP, because the engine is always handed its own id; instruct support is a capability of the engine."""

from __future__ import annotations

import httpx
from support import connect, next_json
from voxgate.client.protocol_client import VoxgateClient
from voxgate.engine.base import VoiceInfo
from voxgate.gateway.voices.voice_rule import resolve_voice


async def test_a_voice_in_another_case_works_everywhere(gateway, fake_engine):
    engine = fake_engine(device_rtf=200)
    server = gateway(engine=engine)
    async with VoxgateClient(server.ws_url, pacing="asap", voice="Tone-A") as client:
        assert client.session["defaults"]["voice"] == "tone-a"
        first = await client.speak("a", "Hello there.")
        second = await client.speak("b", "Hello again.", voice="TONE-B")
        assert not client.errors, client.errors
    assert first.event("context.done")["usage"]["audio_ms"] > 0 and second.event("context.done")
    spoken = httpx.post(server.http_url + "/v1/audio/speech", json={"input": "Over HTTP.", "voice": "Tone-B"})
    assert spoken.status_code == 200 and len(spoken.content) > 0
    assert [r.voice for r, _ in engine.produced] == ["tone-a", "tone-b", "tone-b"]
    ws, _ = await connect(server.ws_url)
    await ws.send('{"type": "context.open", "context_id": "c", "voice": "Tone-C"}')
    assert (await next_json(ws))["code"] == "voice_not_found"
    await ws.close()


def test_resolve_voice():
    class Voices:
        def __init__(self, *ids: str) -> None:
            self.ids = ids

        def voices(self) -> list[VoiceInfo]:
            return [VoiceInfo(i, i) for i in self.ids]

    assert resolve_voice(Voices("tone-a", "Ryan"), "TONE-A") == "tone-a"
    assert resolve_voice(Voices("tone-a", "Ryan"), "ryan") == "Ryan"
    assert resolve_voice(Voices("ab", "AB"), "AB") == "AB"  # exact first
    assert resolve_voice(Voices("ab", "AB"), "Ab") is None  # ambiguous
    assert resolve_voice(Voices("ab"), "abc") is None


async def test_instruct_warns_only_where_the_engine_ignores_it(gateway, fake_engine):
    ignoring = fake_engine()
    taking = fake_engine()
    taking.supports_instruct = True
    for engine, warned in ((ignoring, True), (taking, False)):
        server = gateway(engine=engine)
        async with VoxgateClient(server.ws_url, pacing="asap") as client:
            await client.speak("a", "Hello.", instruct="Whisper it.")
            warnings = [e for e in client.errors if e["code"] == "unsupported"]
        assert bool(warnings) == warned, client.errors
        if warned:
            assert warnings[0]["message"] == "the fake engine ignores instruct" and warnings[0]["type"] == "warning"


async def test_without_a_session_voice_each_context_leaves_the_voice_to_the_engine(gateway, fake_engine):
    """No voice at session.start: the engine picks per context (by its language), not one voice for the session."""
    engine = fake_engine(device_rtf=200)
    server = gateway(engine=engine)
    async with VoxgateClient(server.ws_url, pacing="asap") as client:
        assert client.session["defaults"]["voice"] is None
        await client.speak("a", "Hello there.")
        await client.speak("b", "Guten Tag.", voice="tone-b")
        assert not client.errors, client.errors
    assert [r.voice for r, _ in engine.produced] == [None, "tone-b"]

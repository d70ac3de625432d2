"""Bad input: each case gets the specified error, and a second session running in parallel is not affected."""

from __future__ import annotations

import asyncio
import json

import pytest
import websockets
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import bystander, connect, errors_until_pong, next_error, next_json, until
from voxgate.client.protocol_client import VoxgateClient
from voxgate.gateway.config import GatewayConfig, Limits
from voxgate.gateway.protocol import MESSAGE_TYPES, PROTOCOL, ProtocolError, parse_message

LIMITS = Limits(max_contexts=2, max_message_bytes=2048, max_text_chars=500, max_buffered_text_chars=800,
                idle_timeout_s=1.0, max_messages_per_s=1000)

# (what we send, expected error code, fatal close code or None)
NON_FATAL = [
    ("{not json", "invalid_message"),
    ("[1, 2]", "invalid_message"),
    (json.dumps({"type": "shout", "context_id": "a"}), "invalid_message"),
    (json.dumps({"type": "text.append", "context_id": "a"}), "invalid_message"),  # missing text
    (json.dumps({"type": "text.append", "context_id": "a", "text": 5}), "invalid_message"),  # wrong type
    (json.dumps({"type": "text.append", "context_id": 7, "text": "hi"}), "invalid_message"),
    (json.dumps({"type": "context.open", "context_id": "bad id!"}), "invalid_message"),
    (json.dumps({"type": "context.open", "context_id": "t", "track": True}), "invalid_message"),
    (json.dumps({"type": "context.open", "context_id": "t", "placement": "sideways"}), "invalid_message"),
    (json.dumps({"type": "text.append", "context_id": "a", "text": "x" * 501}), "text_too_long"),
    (json.dumps({"type": "text.append", "context_id": "a", "text": "y" * 3000}), "message_too_large"),
    (json.dumps({"type": "context.flush", "context_id": "nobody"}), "unknown_context"),
    (json.dumps({"type": "context.cancel", "context_id": "nobody"}), "unknown_context"),
    (json.dumps({"type": "context.open", "context_id": "v", "voice": "no-such-voice"}), "voice_not_found"),
    (json.dumps({"type": "session.start"}), "invalid_message"),  # a second one
    (json.dumps({"type": "playback", "played_pts": -5}), "invalid_message"),
]


@pytest.mark.parametrize("raw,code", NON_FATAL, ids=[c for _, c in NON_FATAL])
async def test_non_fatal_errors_keep_the_session(gateway, raw, code):
    server = gateway(limits=LIMITS)
    async with bystander(server.ws_url, voice=None, pacing="asap"):  # espeak: its own default voice
        ws, _ = await connect(server.ws_url)
        await ws.send(raw)
        error = await next_json(ws)
        assert error["type"] == "error" and error["code"] == code and error["fatal"] is False, error
        # The session still works.
        await ws.send(json.dumps({"type": "ping", "t_ms": 1}))
        assert (await next_json(ws))["type"] == "pong"
        await ws.close()


PARAMS = [
    ({"type": "text.append", "context_id": "a"}, "text"),
    ({"type": "text.append", "context_id": "a", "text": 5}, "text"),
    ({"type": "text.append", "context_id": "a", "text": "hi", "colour": 1}, "colour"),
    ({"type": "context.open", "context_id": "bad id!"}, "context_id"),
    ({"type": "context.open", "context_id": "t", "placement": "sideways"}, "placement"),
    ({"type": "context.open", "context_id": "t", "max_audio_ms": 0}, "max_audio_ms"),
    ({"type": "context.open", "context_id": "v", "voice": "no-such-voice"}, "voice"),
    ({"type": "context.open", "context_id": "l", "language": "Klingon"}, "language"),
    ({"type": "text.append", "context_id": "a", "text": "x" * 501}, "text"),
    ({"type": "playback", "played_pts": -5}, "played_pts"),
    ({"type": "shout"}, "type"),
]


@pytest.mark.parametrize("message,param", PARAMS, ids=[p for _, p in PARAMS])
async def test_errors_name_the_field_at_fault(gateway, message, param):
    server = gateway(limits=LIMITS)
    ws, _ = await connect(server.ws_url)
    await ws.send(json.dumps(message))
    error = await next_error(ws)
    assert error["param"] == param, error
    await ws.close()


# Both ways a context's text reaches the engine: text streaming with its rule always open (min_wps 0), so text goes
# into a live engine stream as it comes, and sentence mode. Either way text counts against max_buffered_text_chars
# from its append until the request that speaks it has ended.
TEXT_MODES = {"streamed": {"text_streaming": "auto", "text_stream_min_words": 1, "text_stream_min_wps": 0.0},
              "sentences": {"text_streaming": "off"}}


def _append(context_id: str, text: str) -> str:
    return json.dumps({"type": "text.append", "context_id": context_id, "text": text})


@pytest.mark.parametrize("mode", TEXT_MODES)
async def test_too_many_contexts_and_buffered_text(gateway, fake_engine, mode):
    engine = fake_engine(first_chunk_ms=60_000)  # nothing is spoken during the test: all text accepted stays unspoken
    server = gateway(engine=engine, limits=LIMITS, **TEXT_MODES[mode])
    ws, _ = await connect(server.ws_url)
    for cid in ("a", "b"):
        await ws.send(_append(cid, "word " * 10))
    await ws.send(_append("c", "one too many"))
    error = await next_error(ws)
    assert error["code"] == "context_limit" and error["context_id"] == "c"
    await ws.send(_append("a", "z" * 400))
    # Context a's text reaches the engine: its live stream took the 400 (streamed), or its first segment's request
    # is open (sentences). That text is still unspoken: 450 with this append's 400 is over 800, refused whole.
    if mode == "streamed":
        await until(lambda: any(s.appended == ["z" * 400] for s in engine.streams), what="a's stream took the text")
    else:
        await until(lambda: len(engine.streams) == 1, what="a's first segment went to the engine")
    for _ in range(2):
        await ws.send(_append("a", "z" * 400))
    errors = await errors_until_pong(ws)
    assert [(e["code"], e["context_id"], e["param"]) for e in errors] == [("text_too_long", "a", "text")] * 2
    await ws.close()


@pytest.mark.parametrize("mode", TEXT_MODES)
async def test_spoken_text_no_longer_counts_as_buffered(gateway, fake_engine, mode):
    server = gateway(engine=fake_engine(), limits=LIMITS, **TEXT_MODES[mode])
    ws, _ = await connect(server.ws_url, pacing={"mode": "asap"})
    for text in ("word " * 10, "z" * 400):
        await ws.send(_append("a", text))
    await ws.send(json.dumps({"type": "context.flush", "context_id": "a", "flush_id": "f"}))
    while (message := await next_json(ws))["type"] != "flushed":
        assert message["type"] != "error", message
    for _ in range(2):  # the 450 are spoken: there is room for 800 again
        await ws.send(_append("a", "z" * 400))
    assert await errors_until_pong(ws) == []
    await ws.close()


@pytest.mark.parametrize("case", ["binary", "before_start"])
async def test_protocol_violations_close_with_4400(gateway, case):
    server = gateway(limits=LIMITS)
    async with bystander(server.ws_url, voice=None, pacing="asap"):
        ws = await websockets.connect(server.ws_url, subprotocols=[PROTOCOL])
        assert ws.subprotocol == PROTOCOL
        if case == "binary":
            await ws.send(json.dumps({"type": "session.start"}))
            assert (await next_json(ws))["type"] == "session.started"
            await ws.send(b"\x00\x01")
        else:
            await ws.send(json.dumps({"type": "text.append", "context_id": "a", "text": "hi"}))
        error = await next_json(ws)
        assert error == {"type": "error", "code": "protocol_violation", "message": error["message"], "fatal": True}
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await ws.recv()
        assert closed.value.rcvd.code == 4400


async def test_idle_timeout_closes_with_4008(gateway):
    server = gateway(limits=LIMITS)

    async def speak_and_leave() -> None:  # before its own idle timeout, which is what this test waits for
        async with bystander(server.ws_url, voice=None, pacing="asap"):
            pass

    speaking = asyncio.create_task(speak_and_leave())
    ws, started = await connect(server.ws_url)
    assert started["limits"]["idle_timeout_s"] == 1.0
    error = await next_json(ws, timeout=3)
    assert error["code"] == "idle_timeout" and error["fatal"] is True
    with pytest.raises(websockets.ConnectionClosed) as closed:
        await ws.recv()
    assert closed.value.rcvd.code == 4008
    await speaking


async def test_oversized_frame_beyond_the_hard_cap_closes_1009(gateway):
    server = gateway(limits=LIMITS)
    ws, _ = await connect(server.ws_url)
    await ws.send("x" * (4 * LIMITS.max_message_bytes + 1))
    with pytest.raises(websockets.ConnectionClosed) as closed:
        while True:
            await ws.recv()
    assert closed.value.rcvd.code == 1009


async def test_too_many_sessions_closes_4029(gateway):
    server = gateway(config=GatewayConfig(max_sessions=1, limits=LIMITS))
    first, _ = await connect(server.ws_url)
    ws = await websockets.connect(server.ws_url, subprotocols=[PROTOCOL])
    error = await next_json(ws)
    assert error["code"] == "too_many_sessions"
    with pytest.raises(websockets.ConnectionClosed) as closed:
        await ws.recv()
    assert closed.value.rcvd.code == 4029
    await first.close()


async def test_auth_tokens(gateway):
    server = gateway(config=GatewayConfig(auth_tokens=["s3cret"]))
    ws = await websockets.connect(server.ws_url, subprotocols=[PROTOCOL])
    assert (await next_json(ws))["code"] == "unauthorized"
    with pytest.raises(websockets.ConnectionClosed) as closed:
        await ws.recv()
    assert closed.value.rcvd.code == 4001
    async with VoxgateClient(server.ws_url, token="s3cret", pacing="asap") as client:  # subprotocol token
        assert (await client.speak("t", "Authorized.")).event("context.done")
    ws = await websockets.connect(server.ws_url + "?token=s3cret")
    await ws.send(json.dumps({"type": "session.start"}))
    assert (await next_json(ws))["type"] == "session.started"
    await ws.close()


@pytest.mark.parametrize("serve_demo", [True, False])
async def test_an_unknown_websocket_path_is_404_and_a_foreign_origin_403(gateway, serve_demo):
    server = gateway(serve_demo=serve_demo)
    for path in ("/v1/tts/wss", "/", "/v1/audio/speech"):
        with pytest.raises(websockets.InvalidStatus) as refused:
            await websockets.connect(server.ws_url.replace("/v1/tts/ws", path))
        response = refused.value.response
        assert response.status_code == 404, (path, response.status_code)
        assert json.loads(response.body)["error"]["code"] == "not_found"
    with pytest.raises(websockets.InvalidStatus) as refused:  # the Origin check still comes first
        await websockets.connect(server.ws_url, origin="https://evil.example")
    assert refused.value.response.status_code == 403
    async with VoxgateClient(server.ws_url, pacing="asap") as client:  # the real endpoint is unaffected
        assert (await client.speak("t", "Still here.")).event("context.done")


async def test_rate_limit(gateway):
    server = gateway(limits=Limits(max_messages_per_s=5))
    ws, _ = await connect(server.ws_url)
    for i in range(20):
        await ws.send(json.dumps({"type": "ping", "t_ms": i}))
    kinds = [(await next_json(ws)) for _ in range(20)]
    assert any(m.get("code") == "rate_limited" for m in kinds)
    await ws.close()


# ---- the schema, fuzzed ------------------------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**40, 2**40) | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner, max_size=3),
    max_leaves=8)
field_names = st.sampled_from(["context_id", "text", "flush_id", "track", "placement", "voice", "played_pts",
                               "audio", "pacing", "underruns", "buffered_samples", "t_ms", "max_audio_ms", "x"])
messages = st.builds(
    lambda kind, extra: {"type": kind, **extra},
    st.sampled_from([*MESSAGE_TYPES, "nope"]),
    st.dictionaries(field_names, json_values | st.sampled_from(["a", "ctx-1", 0, 3, "queue"]), max_size=5))


@pytest.mark.slow
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages)
def test_parser_accepts_or_names_the_problem(message):
    raw = json.dumps(message)
    try:
        parsed = parse_message(raw)
    except ProtocolError as exc:
        assert exc.code == "invalid_message" and exc.message and not exc.fatal
        return
    assert message["type"] == parsed.TYPE
    for key, value in message.items():  # what was accepted is exactly what was sent
        if key != "type":
            assert getattr(parsed, key) == value


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(st.lists(messages, min_size=1, max_size=6))
def test_fuzzed_sessions_never_break_the_server(gateway_for_fuzz, batch):
    url = gateway_for_fuzz

    async def run() -> None:
        ws, _ = await connect(url, pacing={"mode": "asap"})
        for message in batch:
            await ws.send(json.dumps(message))
        await ws.send(json.dumps({"type": "ping", "t_ms": 42}))
        while True:  # every message is answered or absorbed; the session stays alive to answer the ping
            m = await next_json(ws, timeout=5)
            assert m["type"] != "error" or not m["fatal"], m
            if m["type"] == "pong" and m["t_ms"] == 42:
                break
        await ws.close()

    asyncio.run(run())


@pytest.fixture(scope="module")
def gateway_for_fuzz():
    from support import RecordingEngine, running_gateway
    from voxgate.engine.fake import FakeEngine

    with running_gateway(RecordingEngine(FakeEngine(device_rtf=200)), GatewayConfig(limits=LIMITS)) as server:
        yield server.ws_url

"""POST /v1/audio/speech as outside clients send it (issue 14, point 1), on a real server with the espeak engine: the
official `openai` SDK for every response format and both stream formats (each result decoded with PyAV and
measured against what the engine made), a vLLM-Omni-shaped Qwen3-TTS request, OpenAI voice names, /v1/models,
and one clear error per field that cannot be honoured."""

from __future__ import annotations

import base64
import io
import json
import time

import av
import httpx
import numpy as np
import pytest
from openai import OpenAI

TEXT = "Hello from the OpenAI client. Every format decodes."
FORMATS = ["mp3", "opus", "aac", "flac", "wav", "pcm"]
# Seconds a decoder may add: mp3 and ADTS carry no priming/padding info, so their encoder delay and last frame's
# padding remain (mp3 at 24 kHz: 576-sample granules; aac: 1024-sample frames plus 1024 of priming).
SLACK_S = {"mp3": 0.12, "aac": 0.15, "opus": 0.025, "flac": 0.0, "wav": 0.0, "pcm": 0.0}


def _client(server) -> OpenAI:
    return OpenAI(base_url=server.http_url + "/v1", api_key="unused", max_retries=0, timeout=60)


def _seconds(fmt: str, data: bytes) -> float:
    """Decoded duration, with PyAV (pcm: raw 24 kHz PCM16)."""
    if fmt == "pcm":
        assert len(data) % 2 == 0
        return len(data) / 2 / 24000
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.audio[0]
        assert stream.codec_context.name.startswith({"mp3": "mp3", "opus": "opus", "aac": "aac", "flac": "flac",
                                                     "wav": "pcm_s16le"}[fmt])
        frames = list(container.decode(stream))
    samples = sum(f.samples for f in frames)
    assert samples and np.abs(np.concatenate([f.to_ndarray().ravel() for f in frames])).max() > 0
    return samples / frames[0].sample_rate


def _check_length(server, fmt: str, data: bytes) -> None:
    expected = len(server.server.config.app.state.voxgate.engine.audio_for()) / 24000
    got = _seconds(fmt, data)
    assert expected > 1.0
    assert expected - 0.001 <= got <= expected + SLACK_S[fmt] + 0.001, (fmt, expected, got)


def _sse_audio(raw: bytes) -> tuple[bytes, dict]:
    """The audio of an SSE body (its deltas joined) and the `speech.audio.done` event."""
    events = []
    for block in raw.decode().split("\n\n"):
        lines = [line for line in block.splitlines() if line]
        if not lines:
            continue
        event = json.loads(next(line[6:] for line in lines if line.startswith("data: ")))
        assert f"event: {event['type']}" in lines
        events.append(event)
    assert [e["type"] for e in events[:-1]] == ["speech.audio.delta"] * (len(events) - 1)
    assert events[-1]["type"] == "speech.audio.done"
    return b"".join(base64.b64decode(e["audio"]) for e in events[:-1]), events[-1]


@pytest.mark.parametrize("fmt", FORMATS)
def test_sdk_create_every_format(gateway, fmt):
    server = gateway()
    response = _client(server).audio.speech.create(model="gpt-4o-mini-tts", voice="alloy", input=TEXT,
                                                   response_format=fmt)
    _check_length(server, fmt, response.content)


@pytest.mark.slow
def test_sdk_default_format_is_mp3(gateway):
    server = gateway()
    response = _client(server).audio.speech.create(model="tts-1", voice="echo", input=TEXT)
    assert response.response.headers["content-type"] == "audio/mpeg"
    _check_length(server, "mp3", response.content)


@pytest.mark.parametrize("stream_format", ["audio", "sse"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_sdk_streaming_every_format(gateway, fmt, stream_format):
    server = gateway()
    client = _client(server)
    with client.audio.speech.with_streaming_response.create(
            model="gpt-4o-mini-tts", voice="coral", input=TEXT, response_format=fmt, stream_format=stream_format,
            instructions="") as response:
        assert response.status_code == 200
        pieces = list(response.iter_bytes())
    raw = b"".join(pieces)
    if stream_format == "sse":
        assert response.headers["content-type"].startswith("text/event-stream")
        raw, done = _sse_audio(raw)
        frames = -(-len(server.server.config.app.state.voxgate.engine.audio_for()) // 1920)
        assert done["usage"] == {"input_tokens": len(TEXT), "output_tokens": frames, "total_tokens": len(TEXT) + frames}
    _check_length(server, fmt, raw)


def test_opus_is_ogg_with_opus_head(gateway):
    server = gateway()
    data = _client(server).audio.speech.create(model="tts-1", voice="nova", input=TEXT, response_format="opus").content
    assert data[:4] == b"OggS" and data[28:36] == b"OpusHead" and b"OpusTags" in data[:200]
    pages = data.count(b"OggS")
    assert pages >= _seconds("opus", data) / 0.02 * 0.9  # about a page per 20 ms packet: nothing held for a page


def test_vllm_omni_qwen3tts_request_streams_pcm(gateway):
    """vLLM-Omni's documented Qwen3-TTS request fields (CustomVoice), raw PCM stream: no voice (the default follows
    the language), task_type, language, max_new_tokens, stream_format audio."""
    server = gateway()
    body = {"model": "voxgate", "input": "Hello, how are you? This is a streamed answer.", "task_type": "CustomVoice",
            "language": "English", "max_new_tokens": 2048, "response_format": "pcm", "stream": True,
            "stream_format": "audio"}
    with httpx.stream("POST", server.http_url + "/v1/audio/speech", json=body, timeout=30) as response:
        assert response.status_code == 200 and response.headers["content-type"] == "audio/pcm"
        assert response.headers["x-sample-rate"] == "24000"
        data = b"".join(response.iter_bytes())
    engine = server.server.config.app.state.voxgate.engine
    request, _ = engine.produced[-1]
    assert request.language == "en-us" and request.voice is None  # espeak's voice of English
    assert np.array_equal(np.frombuffer(data, "<i2"), engine.audio_for()) and len(data) > 48000


def test_max_new_tokens_is_a_length_budget(gateway):
    server = gateway()
    body = {"input": "This text would take several seconds to say out loud.", "max_new_tokens": 5,
            "response_format": "pcm"}
    response = httpx.post(server.http_url + "/v1/audio/speech", json=body, timeout=30)
    assert len(response.content) == 5 * 1920 * 2


def test_voice_aliases_models_and_voices(gateway):
    from voxgate.gateway.config import GatewayConfig

    server = gateway(config=GatewayConfig(voice_aliases={"espeak": {"alloy": "en-gb", "narrator": "en-gb-x-rp"}},
                                          model_aliases=["my-tts"]))
    voices = httpx.get(server.http_url + "/v1/voices").json()
    assert voices["aliases"]["alloy"] == "en-gb" and voices["aliases"]["narrator"] == "en-gb-x-rp"
    assert voices["aliases"]["shimmer"] == "en-us"
    listed = httpx.get(server.http_url + "/v1/audio/voices").json()
    assert "en-us" in listed["voices"] and "alloy" in listed["voices"] and listed["uploaded_voices"] == []
    models = _client(server).models.list()
    assert [m.id for m in models.data] == ["voxgate", "espeak", "my-tts"]
    assert all(m.object == "model" and m.owned_by == "voxgate" for m in models.data)
    for voice in ("ALLOY", "narrator"):
        _client(server).audio.speech.create(model="my-tts", voice=voice, input="Hi.", response_format="pcm")
    assert [r.voice for r, _ in server.server.config.app.state.voxgate.engine.produced] == ["en-gb", "en-gb-x-rp"]


@pytest.mark.slow
def test_served_model_name_is_served_and_listed_first(gateway):
    from voxgate.gateway.config import GatewayConfig

    server = gateway(config=GatewayConfig(served_model_name=["espeak-en"]))
    models = [m.id for m in _client(server).models.list().data]
    assert models == ["espeak-en", "voxgate", "espeak", "tts-1", "tts-1-hd", "gpt-4o-mini-tts",
                      "gpt-4o-mini-tts-2025-12-15"]
    for model, status in (("espeak-en", 200), ("ESPEAK-EN", 200), ("tts-1", 200),
                          ("Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice", 404), ("espeak-fr", 404)):
        body = {"model": model, "input": "Hi.", "voice": "alloy", "response_format": "pcm"}
        response = httpx.post(server.http_url + "/v1/audio/speech", json=body, timeout=30)
        assert response.status_code == status, (model, response.text)
    with pytest.raises(ValueError, match="served_model_name"):
        GatewayConfig(served_model_name=[" "])


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["espeak", "fake"])
def test_non_streaming_mode_is_accepted_either_way_where_it_means_nothing(gateway, fake_engine, engine):
    """Text layout is a Qwen3-TTS notion: espeak and the test tones take both values and speak the same audio."""
    server = gateway(engine=fake_engine() if engine == "fake" else None)
    recorded = server.server.config.app.state.voxgate.engine
    lengths = []
    for extra in ({}, {"non_streaming_mode": True}, {"non_streaming_mode": False}):
        before = len(recorded.produced)
        body = {"model": "tts-1", "input": TEXT, "voice": "alloy", "response_format": "pcm", **extra}
        response = httpx.post(server.http_url + "/v1/audio/speech", json=body, timeout=30)
        assert response.status_code == 200, response.text
        made = [c for _, chunks in recorded.produced[before:] for c in chunks]
        assert response.content == np.concatenate(made).tobytes()
        # All of the text, once: what opened each stream and what was appended to it while it spoke.
        spoken = " ".join(s.request.text + "".join(s.appended) for s in recorded.streams[before:])
        assert spoken.split() == TEXT.split()
        lengths.append(len(response.content))
    assert min(lengths) > 48000
    if engine == "fake":  # (espeak-ng's length varies by a few samples from call to call)
        assert lengths[0] == lengths[1] == lengths[2], lengths


@pytest.mark.parametrize("extra,status,code,param", [
    ({"ref_audio": "https://example.com/ref.wav"}, 400, "unsupported_field", "ref_audio"),
    ({"ref_text": "Transcript."}, 400, "unsupported_field", "ref_text"),
    ({"task_type": "Base"}, 400, "unsupported_field", "task_type"),
    ({"task_type": "Clone"}, 400, "invalid_value", "task_type"),
    ({"instructions": "Speak warmly."}, 400, "unsupported_field", "instructions"),
    ({"instructions": "a", "instruct": "b"}, 400, "invalid_value", "instructions"),
    ({"initial_codec_chunk_frames": 1}, 400, "unsupported_field", "initial_codec_chunk_frames"),
    ({"x_vector_only_mode": True}, 400, "unsupported_field", "x_vector_only_mode"),
    ({"max_new_tokens": 0}, 400, "invalid_value", "max_new_tokens"),
    ({"speed": 1.5}, 400, "unsupported_speed", "speed"),
    ({"seed": 3}, 400, "unknown_field", "seed"),
    ({"stream_format": "ws"}, 400, "invalid_type", "stream_format"),
    ({"input": 5}, 400, "invalid_type", "input"),
    ({"model": "gpt-5"}, 404, "model_not_found", "model"),
    ({"voice": "nobody"}, 404, "voice_not_found", "voice"),
    ({"language": "Klingon"}, 400, "language_not_supported", "language"),
    ({"language": "tlh"}, 400, "language_not_supported", "language"),
])
def test_fields_that_cannot_be_honoured_are_named(gateway, extra, status, code, param):
    server = gateway()
    body = {"model": "tts-1", "input": "Hello.", "response_format": "pcm", **{k: v for k, v in extra.items()}}
    if "language" in extra:
        body.pop("voice", None)
    response = httpx.post(server.http_url + "/v1/audio/speech", json=body, timeout=30)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code and error["param"] == param
    if param:
        assert param in error["message"]


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["mp3", "opus", "aac", "flac"])
def test_an_encoder_made_ahead_serves_the_next_request(gateway, fmt):
    """The first request of a format leaves one encoder ready for the next (its codec open off the critical path);
    the request served by it decodes to the full length, and the one after that too."""
    from voxgate.gateway.http import speech

    speech._ready.take(fmt)  # start from none ready
    for _ in range(3):
        server = gateway()  # a fresh engine per request: _check_length compares with all the audio it made
        with _client(server).audio.speech.with_streaming_response.create(model="tts-1", voice="alloy", input=TEXT,
                                                                         response_format=fmt) as response:
            _check_length(server, fmt, response.read())
    deadline = time.monotonic() + 5
    while speech._ready.take(fmt) is None:  # refilled off the event loop once each request's first bytes were out
        assert time.monotonic() < deadline, "no encoder was made ahead"
        time.sleep(0.01)


def test_ready_encoders_hand_over_one_and_refill() -> None:
    from voxgate.gateway.audio.containers import ReadyEncoders

    ready = ReadyEncoders()
    assert ready.take("flac") is None
    ready.refill("flac")
    encoder = ready.take("flac")
    assert encoder is not None and ready.take("flac") is None
    data = encoder.start() + encoder.encode(np.zeros(4800, np.int16).tobytes()) + encoder.finish()
    assert _seconds_any(data) == pytest.approx(0.2, abs=0.001)


def _seconds_any(data: bytes) -> float:
    with av.open(io.BytesIO(data)) as container:
        frames = list(container.decode(container.streams.audio[0]))
    return sum(f.samples for f in frames) / frames[0].sample_rate

"""Uploaded voices through the loop **(i16)**: POST /v1/voices on a real gateway in front of a tiny Base checkpoint
(CPU, fp32, greedy); the voice speaks over HTTP and WebSocket exactly as `clone_voice` + generate + decode offline,
survives a restart, goes away on DELETE, belongs to its token, and every bad upload is refused with nothing written.

VOXGATE_TEST_DEVICE=cuda runs the same gateway's engine on the GPU (CUDA graphs, the upload's encoders on their side
stream, fp32 without TF32), still against the offline clone on the CPU."""

from __future__ import annotations

import asyncio
import io
import json
import os
import wave
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import torch
from support import connect, cpu_loop_config, running_gateway
from voxgate.engine.qwen3tts.engine import create_engine
from voxgate.engine.qwen3tts.tools.wav import to_int16
from voxgate.gateway.transport.uvicorn_server import BackgroundServer

from .test_gateway import SMALL

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:transformers.*")

TEXT = "Hello from an uploaded voice."
REF_TEXT = "This is the reference transcript."
MAX_AUDIO_MS = 800  # 10 frames: random weights rarely sample EOS, so the budget fixes the length
ALICE, BOB = {"Authorization": "Bearer alice"}, {"Authorization": "Bearer bob"}
LIMITS = dict(max_voice_upload_bytes=2_000_000, max_voices=4)
DEVICE = os.environ.get("VOXGATE_TEST_DEVICE", "cpu")
ENGINE = {**SMALL, "device": DEVICE} | ({"codec": "reference"} if DEVICE != "cpu" else {})


def recording(seconds: float, sr: int = 16_000, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    n = int(sr * seconds)
    return (0.1 * rng.standard_normal(n) + 0.2 * np.sin(np.arange(n) * 0.03)).astype(np.float32)


def wav_bytes(audio: np.ndarray, sr: int = 16_000) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(sr)
        w.writeframes(to_int16(audio).tobytes())
    return out.getvalue()


def read_wav_bytes(data: bytes) -> tuple[np.ndarray, int]:
    """read_wav's reading (int16 / 32768), from bytes."""
    with wave.open(io.BytesIO(data), "rb") as w:
        return np.frombuffer(w.readframes(w.getnframes()), np.int16).astype(np.float32) / 32768.0, w.getframerate()


def _config(voices_dir: Path) -> Any:
    return cpu_loop_config(voices_dir=str(voices_dir), auth_tokens=["alice", "bob"], **LIMITS)


@pytest.fixture(scope="module")
def voices_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("voices")


@pytest.fixture(scope="module")
def server(tiny_ckpt: Callable[[str], Path], voices_dir: Path) -> Iterator[BackgroundServer]:
    # TF32 off before the engine starts: its CUDA graphs keep the math mode of their capture
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        engine = create_engine(model=str(tiny_ckpt("base17")), **ENGINE)
        with running_gateway(engine, _config(voices_dir)) as srv:
            yield srv
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def upload(server: BackgroundServer, data: bytes, headers: dict[str, str] = ALICE, **fields: str) -> httpx.Response:
    return httpx.post(server.http_url + "/v1/voices", files={"file": ("ref.wav", data, "audio/wav")}, data=fields,
                      headers=headers, timeout=120)


def offline_pcm(ours: Callable[[str], Any], wav: bytes, ref_text: str | None) -> np.ndarray:
    """What the uploaded voice must say: clone_voice on the same recording, greedy codes, whole decode."""
    m = ours("base17")
    audio, sr = read_wav_bytes(wav)
    voice = m.clone_voice(audio, sr, ref_text=ref_text)
    codes = m.generate_codes(m.build(m.prompt_inputs(TEXT, voice, "auto")), m.cfg.generation.greedy(),
                             max_frames=MAX_AUDIO_MS // 80)
    return to_int16(m.decode(codes, voice.ref_codes))


def speak_http(server: BackgroundServer, voice: str, headers: dict[str, str] = ALICE) -> httpx.Response:
    body = {"input": TEXT, "voice": voice, "response_format": "pcm", "max_audio_ms": MAX_AUDIO_MS}
    return httpx.post(server.http_url + "/v1/audio/speech", json=body, headers=headers, timeout=120)


async def speak_ws(server: BackgroundServer, voice: str, token: str = "alice") -> tuple[np.ndarray, dict, list]:
    ws, started = await connect(server.ws_url + f"?token={token}", pacing={"mode": "asap"})
    await ws.send(json.dumps({"type": "context.open", "context_id": "a", "voice": voice,
                              "max_audio_ms": MAX_AUDIO_MS}))
    await ws.send(json.dumps({"type": "text.append", "context_id": "a", "text": TEXT}))
    await ws.send(json.dumps({"type": "context.end", "context_id": "a"}))
    frames, events = [], []
    while not events or events[-1]["type"] not in ("context.done", "error"):
        raw = await asyncio.wait_for(ws.recv(), 120)
        if isinstance(raw, bytes):
            frames.append(np.frombuffer(raw[24:], "<i2"))
        else:
            events.append(json.loads(raw))
    await ws.close()
    return (np.concatenate(frames) if frames else np.zeros(0, np.int16)), started, events


def files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def close_to(got: np.ndarray, want: np.ndarray) -> bool:
    return got.shape == want.shape and int(np.abs(got.astype(np.int32) - want).max()) <= 1


@pytest.mark.slow
@pytest.mark.usefixtures("no_tf32")
def test_in_context_upload_speaks_like_the_offline_clone(server: BackgroundServer, ours: Callable[[str], Any],
                                                         voices_dir: Path) -> None:
    wav = wav_bytes(recording(3.5))
    response = upload(server, wav, ref_text=REF_TEXT, name="Reader")
    assert response.status_code == 201, response.text
    voice = response.json()
    assert voice["mode"] == "in_context" and voice["name"] == "Reader" and voice["ref_text"] == REF_TEXT
    assert voice["id"].startswith("voice_") and abs(voice["duration_s"] - 3.5) < 1e-3
    assert {f"{voice['id']}.json", f"{voice['id']}.npz"} <= set(files(voices_dir))

    want = offline_pcm(ours, wav, REF_TEXT)
    assert want.shape == (10 * 1920,)
    spoken = speak_http(server, voice["id"])
    assert spoken.status_code == 200, spoken.text
    assert close_to(np.frombuffer(spoken.content, "<i2"), want)
    pcm, started, events = asyncio.run(speak_ws(server, voice["id"]))
    assert voice["id"] in started["voices"] and events[-1]["type"] == "context.done", events
    assert close_to(pcm, want)

    listed = httpx.get(server.http_url + "/v1/voices", headers=ALICE, timeout=10).json()
    entry = next(v for v in listed["voices"] if v["id"] == voice["id"])
    assert entry["uploaded"] and entry["mode"] == "in_context" and entry["name"] == "Reader"
    omni = httpx.get(server.http_url + "/v1/audio/voices", headers=ALICE, timeout=10).json()
    assert [v["id"] for v in omni["uploaded_voices"]] == [voice["id"]]
    assert httpx.get(server.http_url + f"/v1/voices/{voice['id']}", headers=ALICE, timeout=10).json() == voice
    assert httpx.delete(server.http_url + f"/v1/voices/{voice['id']}", headers=ALICE, timeout=10).status_code == 200


@pytest.mark.usefixtures("no_tf32")
def test_x_vector_upload_as_a_raw_body(server: BackgroundServer, ours: Callable[[str], Any]) -> None:
    wav = wav_bytes(recording(4.0, seed=1))
    response = httpx.post(server.http_url + "/v1/voices", content=wav, params={"mode": "x_vector"},
                          headers={**ALICE, "Content-Type": "audio/wav"}, timeout=120)
    assert response.status_code == 201, response.text
    voice = response.json()
    assert voice["mode"] == "x_vector" and voice["ref_text"] is None and voice["name"] == voice["id"]
    spoken = speak_http(server, voice["id"])
    assert spoken.status_code == 200 and close_to(np.frombuffer(spoken.content, "<i2"), offline_pcm(ours, wav, None))
    httpx.delete(server.http_url + f"/v1/voices/{voice['id']}", headers=ALICE, timeout=10)


def test_voices_belong_to_their_token(server: BackgroundServer) -> None:
    voice = upload(server, wav_bytes(recording(3.2, seed=2)), ref_text=REF_TEXT).json()
    url = server.http_url + f"/v1/voices/{voice['id']}"
    assert httpx.get(url, headers=BOB, timeout=10).status_code == 404
    assert httpx.delete(url, headers=BOB, timeout=10).status_code == 404
    assert httpx.get(url, timeout=10).status_code == 401
    for headers in (BOB, {}):
        listed = httpx.get(server.http_url + "/v1/voices", headers=headers, timeout=10).json()
        assert voice["id"] not in [v["id"] for v in listed["voices"]]
    refused = speak_http(server, voice["id"], headers=BOB)
    assert refused.status_code == 404 and refused.json()["error"]["code"] == "voice_not_found"
    _, started, events = asyncio.run(speak_ws(server, voice["id"], token="bob"))
    assert voice["id"] not in started["voices"] and events[-1]["code"] == "voice_not_found"
    assert upload(server, wav_bytes(recording(3.2)), headers={}).status_code == 401
    assert httpx.get(url, headers=ALICE, timeout=10).status_code == 200
    assert httpx.delete(url, headers=ALICE, timeout=10).json() == {"id": voice["id"], "object": "voice",
                                                                   "deleted": True}


BAD = {
    "not_audio": (dict(data=b"RIFF this is not a recording at all" * 10), 400, "invalid_audio"),
    "too_short": (dict(data=wav_bytes(recording(2.5))), 400, "audio_too_short"),
    "too_long": (dict(data=wav_bytes(recording(31.0, sr=8_000), 8_000)), 400, "audio_too_long"),
    "silent": (dict(data=wav_bytes(np.zeros(16_000 * 4, np.float32))), 400, "audio_silent"),
    "too_large": (dict(data=wav_bytes(recording(29.0, sr=44_100), 44_100)), 413, "upload_too_large"),
    "unknown_mode": (dict(data=wav_bytes(recording(3.5)), mode="icl"), 400, "invalid_mode"),
    "no_transcript": (dict(data=wav_bytes(recording(3.5)), mode="in_context"), 400, "missing_ref_text"),
    "unknown_field": (dict(data=wav_bytes(recording(3.5)), speed="2"), 400, "unknown_field"),
    # 10,000 characters (limits.max_text_chars) for 3.5 s: taken, its voice would answer every request 413
    "long_ref_text": (dict(data=wav_bytes(recording(3.5)), ref_text="word " * 2000), 400, "ref_text_too_long"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_uploads_are_refused_and_write_nothing(server: BackgroundServer, voices_dir: Path, case: str) -> None:
    fields, status, code = BAD[case]
    before = files(voices_dir)
    response = upload(server, **fields)
    assert response.status_code == status and response.json()["error"]["code"] == code, response.text
    assert files(voices_dir) == before


def test_a_transcript_must_fit_its_recording(server: BackgroundServer, voices_dir: Path) -> None:
    """At most one token per 80 ms frame: 43 for 3.5 s; the refusal names the field and the limit."""
    wav = wav_bytes(recording(3.5, seed=5))
    refused = upload(server, wav, ref_text="word " * 44)  # 44 tokens ("word" and " word" are one token each)
    error = refused.json()["error"]
    assert refused.status_code == 400 and error["code"] == "ref_text_too_long" and error["param"] == "ref_text"
    assert "ref_text is 44 tokens" in error["message"] and "at most 43" in error["message"], error
    assert files(voices_dir) == []
    taken = upload(server, wav, ref_text="word " * 43)
    assert taken.status_code == 201, taken.text
    assert httpx.delete(server.http_url + f"/v1/voices/{taken.json()['id']}", headers=ALICE, timeout=10).is_success


def test_too_many_voices(server: BackgroundServer, voices_dir: Path) -> None:
    made = [upload(server, wav_bytes(recording(3.0, seed=10 + i))).json()["id"] for i in range(LIMITS["max_voices"])]
    before = files(voices_dir)
    refused = upload(server, wav_bytes(recording(3.0)))
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "too_many_voices"
    assert files(voices_dir) == before
    bobs = upload(server, wav_bytes(recording(3.0)), headers=BOB)  # each token has its own max_voices
    assert bobs.status_code == 201, bobs.text
    made.append(bobs.json()["id"])
    for voice_id, headers in zip(made, [ALICE] * LIMITS["max_voices"] + [BOB], strict=True):
        httpx.delete(server.http_url + f"/v1/voices/{voice_id}", headers=headers, timeout=10)
    assert files(voices_dir) == []


@pytest.mark.slow
@pytest.mark.usefixtures("no_tf32")
def test_a_restart_keeps_the_voices(tiny_ckpt: Callable[[str], Path], ours: Callable[[str], Any],
                                    tmp_path: Path) -> None:
    wav = wav_bytes(recording(3.5, seed=3))
    with running_gateway(create_engine(model=str(tiny_ckpt("base17")), **ENGINE), _config(tmp_path)) as first:
        voice = upload(first, wav, ref_text=REF_TEXT).json()
    (tmp_path / f".{voice['id']}.npz.tmp").write_bytes(b"an upload cut short")  # removed at the next start
    with running_gateway(create_engine(model=str(tiny_ckpt("base17")), **ENGINE), _config(tmp_path)) as second:
        listed = httpx.get(second.http_url + "/v1/voices", headers=ALICE, timeout=10).json()
        assert [v["id"] for v in listed["voices"] if v.get("uploaded")] == [voice["id"]]
        assert files(tmp_path) == [f"{voice['id']}.json", f"{voice['id']}.npz"]
        spoken = speak_http(second, voice["id"])
        assert spoken.status_code == 200 and close_to(np.frombuffer(spoken.content, "<i2"),
                                                      offline_pcm(ours, wav, REF_TEXT))
        engine = second.server.config.app.state.voxgate.engine
        torch.testing.assert_close(torch.as_tensor(engine._uploaded[voice["id"]].ref_codes).cpu(),
                                   ours("base17").clone_voice(*read_wav_bytes(wav), REF_TEXT).ref_codes)
        assert httpx.delete(second.http_url + f"/v1/voices/{voice['id']}", headers=ALICE, timeout=10).is_success
        assert httpx.get(second.http_url + f"/v1/voices/{voice['id']}", headers=ALICE, timeout=10).status_code == 404
        assert speak_http(second, voice["id"]).status_code == 404
        assert files(tmp_path) == []


@pytest.mark.slow
@pytest.mark.usefixtures("no_tf32")
def test_an_uploaded_in_context_voice_takes_streamed_text(tiny_ckpt: Callable[[str], Path],
                                                         ours: Callable[[str], Any]) -> None:
    """Text arriving in pieces (text_open): an in-context prompt interleaves the whole text with the reference
    frames, so the stream waits for the end and then speaks as the whole text would."""
    from voxgate.engine.base import SynthesisRequest

    wav = wav_bytes(recording(3.5, seed=4))

    async def run() -> np.ndarray:
        engine = create_engine(model=str(tiny_ckpt("base17")), **ENGINE)
        await engine.start()
        try:
            audio, sr = read_wav_bytes(wav)
            engine.add_voice("voice_00000000000000ee", engine.voice_prompt(audio, sr, REF_TEXT), REF_TEXT)
            stream = engine.open_stream(SynthesisRequest("Hello from", voice="voice_00000000000000ee",
                                                         max_audio_ms=MAX_AUDIO_MS, text_open=True))
            stream.append_text(" an uploaded")
            await asyncio.sleep(0.2)
            assert stream.engine_request is None  # nothing spoken before the text's end
            stream.append_text(" voice.")
            stream.end_text()
            return np.concatenate([chunk async for chunk in stream])
        finally:
            await engine.stop()

    assert close_to(asyncio.run(run()), offline_pcm(ours, wav, REF_TEXT))

"""POST /v1/voices without a cloning engine, the multipart reader, the audio checks and the store's start-up
**(i16)**; the voices going through the Qwen3-TTS loop are tests/qwen3tts/test_voice_upload.py."""

from __future__ import annotations

import io
import json
import wave
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from voxgate.engine.base import Engine, EngineError
from voxgate.gateway.audio.upload_decode import UploadError, check_recording, decode_audio
from voxgate.gateway.config import GatewayConfig
from voxgate.gateway.http.voices_api import parse_multipart
from voxgate.gateway.voices.store import VoiceStore


def _wav(seconds: float, sr: int = 16_000, channels: int = 1) -> bytes:
    out = io.BytesIO()
    t = np.arange(int(seconds * sr))
    pcm = (np.stack([np.sin(t * 0.01 * (c + 1)) for c in range(channels)], axis=1) * 8000).astype(np.int16)
    with wave.open(out, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(sr)
        w.writeframes(pcm.tobytes())
    return out.getvalue()


def test_uploads_need_a_voices_dir_and_an_engine_that_clones(gateway, fake_engine, tmp_path: Path) -> None:
    off = gateway(engine=fake_engine())
    response = httpx.post(off.http_url + "/v1/voices", content=_wav(4))
    assert response.status_code == 501 and response.json()["error"]["code"] == "voice_uploads_disabled"
    assert httpx.get(off.http_url + "/v1/voices/voice_0123456789abcdef").status_code == 404
    assert httpx.get(off.http_url + "/v1/audio/voices").json()["uploaded_voices"] == []
    on = gateway(engine=fake_engine(), voices_dir=str(tmp_path))
    response = httpx.post(on.http_url + "/v1/voices", content=_wav(4))
    assert response.status_code == 501 and response.json()["error"]["code"] == "unsupported"
    assert list(tmp_path.iterdir()) == []


def test_multipart_fields_are_read_byte_exact() -> None:
    payload = bytes(range(256)) * 3 + b"\r\n--not-the-boundary\r\n\r\n"
    body = (b"preamble\r\n--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a b.wav\"\r\n"
            b"Content-Type: audio/wav\r\n\r\n" + payload + b"\r\n--XyZ\r\n"
            b"Content-Disposition: form-data; name=\"ref_text\"\r\n\r\nHello \xc3\xa9\r\n--XyZ--\r\n")
    fields = parse_multipart(body, 'multipart/form-data; boundary="XyZ"')
    assert fields == {"file": payload, "ref_text": "Hello é".encode()}
    with pytest.raises(UploadError, match="closing delimiter"):
        parse_multipart(body[:-9], "multipart/form-data; boundary=XyZ")
    with pytest.raises(UploadError, match="boundary"):
        parse_multipart(body, "multipart/form-data")


def test_audio_is_decoded_and_checked() -> None:
    rec = decode_audio(_wav(3.5, 22_050, channels=2), 30)
    assert rec.sample_rate == 22_050 and rec.audio.dtype == np.float32 and rec.audio.ndim == 1
    assert abs(rec.duration_s - 3.5) < 1e-3
    check_recording(rec, 3, 30)
    bad = ((b"", "invalid_audio"), (b"ID3 not really an mp3", "invalid_audio"), (_wav(40), "audio_too_long"))
    for data, code in bad:
        with pytest.raises(UploadError) as exc:
            decode_audio(data, 30)
        assert exc.value.code == code
    rec.audio[:] = 0
    with pytest.raises(UploadError, match="silent"):
        check_recording(rec, 3, 30)


def test_limits_are_validated() -> None:
    for bad in (dict(max_voices=0), dict(max_voice_upload_bytes=0), dict(min_voice_s=5, max_voice_s=4)):
        with pytest.raises(ValueError):
            GatewayConfig(**bad)


class _Cloner(Engine):
    name = "cloner"
    supports_voice_upload = True

    def __init__(self) -> None:
        self.added: dict[str, Any] = {}

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    @property
    def ready(self) -> bool:
        return True

    def voices(self) -> list:
        return []

    def open_stream(self, request: Any) -> Any:
        raise EngineError("voice_not_found", "none")

    def add_voice(self, voice_id: str, prompt: dict[str, np.ndarray], ref_text: str | None) -> None:
        if prompt["x_vector"].shape != (4,):
            raise EngineError("bad_request", "wrong shape")
        self.added[voice_id] = (prompt, ref_text)


def test_the_store_reloads_good_voices_and_skips_broken_ones(tmp_path: Path) -> None:
    record = {"name": "n", "mode": "in_context", "ref_text": "hi", "duration_s": 3.0, "sample_rate": 16000,
              "created_at": 1, "owner": None}
    for voice_id, shape in (("voice_00000000000000aa", 4), ("voice_00000000000000bb", 5)):
        (tmp_path / f"{voice_id}.json").write_text(json.dumps({"id": voice_id, **record}))
        np.savez(tmp_path / f"{voice_id}.npz", x_vector=np.zeros(shape, np.float32))
    (tmp_path / "voice_00000000000000cc.json").write_text("{not json")
    (tmp_path / ".voice_00000000000000dd.json.tmp").write_text("cut short")
    engine = _Cloner()
    store = VoiceStore(tmp_path, engine, 10, auth_on=False)
    assert store.load() == 1 and list(engine.added) == ["voice_00000000000000aa"]
    assert engine.added["voice_00000000000000aa"][1] == "hi"
    assert not (tmp_path / ".voice_00000000000000dd.json.tmp").exists()


def test_a_failed_write_leaves_no_voice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio
    import os

    from voxgate.gateway.audio.upload_decode import Recording

    class Prompting(_Cloner):
        def voice_prompt(self, audio: np.ndarray, sample_rate: int, ref_text: str | None) -> dict[str, np.ndarray]:
            return {"x_vector": np.ones(4, np.float32)}

    engine = Prompting()
    store = VoiceStore(tmp_path, engine, 10, auth_on=False)
    rec = Recording(np.full(48_000, 0.1, np.float32), 16_000)
    replace = os.replace

    def failing(src: Any, dst: Any) -> None:
        if str(dst).endswith(".json"):
            raise OSError("disk full")
        replace(src, dst)

    monkeypatch.setattr(os, "replace", failing)
    with pytest.raises(OSError, match="disk full"):
        asyncio.run(store.add(rec, None, "x_vector", None, None))
    assert list(tmp_path.iterdir()) == [] and store.records == {} and engine.added == {}
    monkeypatch.setattr(os, "replace", replace)
    record = asyncio.run(store.add(rec, "n", "x_vector", None, None))
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{record.id}.json", f"{record.id}.npz"]
    assert list(engine.added) == [record.id]

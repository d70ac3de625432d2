"""POST /v1/voices is no memory bomb and no slot hog: headers checked before decoding, decoding bounded, uploads
capped at once, bodies timed, voices counted per token, and unusable recordings refused, each on a real gateway
with files encoded here by PyAV (FFmpeg). The engine clones without weights (its prompt is four statistics)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import select
import socket
import threading
import tracemalloc
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import av
import httpx
import numpy as np
import pytest
from test_voice_upload_api import _Cloner
from voxgate.gateway.config import GatewayConfig
from voxgate.gateway.transport.uvicorn_server import BackgroundServer


class _Prompting(_Cloner):
    """Clones in no time; with a `gate`, each prompt waits for it (`entered` is set meanwhile)."""

    def __init__(self, gate: threading.Event | None = None) -> None:
        super().__init__()
        self.gate, self.entered = gate, threading.Event()

    def voice_prompt(self, audio: np.ndarray, sample_rate: int, ref_text: str | None) -> dict[str, np.ndarray]:
        self.entered.set()
        if self.gate is not None and not self.gate.wait(60):
            raise RuntimeError("the test never opened the gate")
        stats = [audio.mean(), audio.std(), np.abs(audio).max(), sample_rate]
        return {"x_vector": np.asarray(stats, np.float32)}


def encoded(blocks: Iterable[np.ndarray], rate: int, codec: str = "pcm_s16le", container: str = "wav") -> bytes:
    """`blocks` ([n, channels] int16, or float32 for pcm_f32le) encoded into one file, block by block."""
    out = io.BytesIO()
    with av.open(out, "w", format=container) as file:
        stream = None
        for block in blocks:
            if stream is None:
                layout = {1: "mono", 2: "stereo"}.get(block.shape[1], f"{block.shape[1]}c")
                stream = file.add_stream(codec, rate=rate, layout=layout)
                start = 0
            frame = av.AudioFrame.from_ndarray(block.reshape(1, -1), format="flt" if block.dtype == np.float32
                                               else "s16", layout=stream.layout.name)
            frame.sample_rate, frame.pts = rate, start
            start += block.shape[0]
            for packet in stream.encode(frame):
                file.mux(packet)
        assert stream is not None
        for packet in stream.encode(None):
            file.mux(packet)
    return out.getvalue()


def tone(seconds: float, rate: int = 16_000, scale: float = 0.25) -> np.ndarray:
    return (scale * np.sin(np.arange(int(seconds * rate)) * 0.05)).astype(np.float32)[:, None]


def as_int16(audio: np.ndarray) -> np.ndarray:
    return (audio * 32767).astype(np.int16)


@pytest.fixture
def uploads(gateway, tmp_path: Path):
    """`uploads(engine=None, **config)`: a gateway that takes uploads into tmp_path/voices."""
    def start(engine: _Prompting | None = None, **fields: Any) -> BackgroundServer:
        return gateway(engine=engine or _Prompting(), voices_dir=str(tmp_path / "voices"), **fields)

    return start


def post(server: BackgroundServer, data: bytes, **kwargs: Any) -> httpx.Response:
    return httpx.post(server.http_url + "/v1/voices", content=data, timeout=60, **kwargs)


def refusal(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code >= 400, response.text
    return response.json()["error"]


@pytest.mark.slow
def test_a_flac_declaring_655350_hz_x_8_channels_is_refused_before_decoding(uploads, tmp_path: Path) -> None:
    # 28 KB of FLAC-coded silence declaring 30 s at 655,350 Hz x 8 channels: 629 MB as float32 once decoded
    bomb = encoded((np.zeros((65_536, 8), np.int16) for _ in range(300)), 655_350, "flac", "flac")
    assert len(bomb) < 64_000
    server = uploads()
    tracemalloc.start()  # numpy's buffers are traced: whatever the decoder handed over would show here
    try:
        response = post(server, bomb)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    error = refusal(response)
    assert response.status_code == 400 and error["code"] == "invalid_sample_rate" and error["param"] == "file"
    assert "655350 Hz" in error["message"] and "8000 to 192000 Hz" in error["message"]
    assert peak < 16 * 2**20, f"{peak / 2**20:.0f} MiB traced while refusing"
    assert not any((tmp_path / "voices").iterdir())


def test_decoding_stops_at_max_voice_s_when_the_header_declares_no_length(uploads) -> None:
    flac = bytearray(encoded([as_int16(tone(60.0))], 16_000, "flac", "flac"))
    # STREAMINFO (after "fLaC" and its 4-byte block header) ends its fields with a 36-bit sample count: 0, unknown
    flac[8 + 13] &= 0xF0
    flac[8 + 14:8 + 18] = bytes(4)
    with av.open(io.BytesIO(bytes(flac))) as probe:
        assert probe.streams.audio[0].duration is None
    error = refusal(post(uploads(), bytes(flac)))
    assert error["code"] == "audio_too_long" and "decoding stopped at" in error["message"], error
    stopped_at = float(error["message"].rpartition("stopped at ")[2].removesuffix(" s"))
    assert 30.0 < stopped_at <= 30.0 + 4608 / 16_000  # one FLAC block past max_voice_s, not the whole minute


@pytest.mark.parametrize(("rate", "channels", "seconds", "code"), [(1, 1, 30, "invalid_sample_rate"),
                                                                   (4_000, 1, 4, "invalid_sample_rate"),
                                                                   (16_000, 12, 4, "too_many_channels")])
def test_headers_outside_the_accepted_ranges_are_refused(uploads, rate: int, channels: int, seconds: float,
                                                         code: str) -> None:
    # 30 samples at 1 Hz are "30 s": refused by the rate (8..192 kHz), never taken as a voice
    wav = encoded([np.tile(as_int16(tone(seconds, rate)), (1, channels))], rate)
    error = refusal(post(uploads(), wav))
    assert error["code"] == code and error["param"] == "file", error


@pytest.mark.parametrize(("poison", "words"), [("nan", "NaN or infinite"), ("huge", "peak is 2.5e+20")])
def test_unusable_samples_are_refused(uploads, tmp_path: Path, poison: str, words: str) -> None:
    audio = tone(4.0)
    if poison == "nan":
        audio[1000:1010] = np.nan
    else:
        audio *= 1e21  # a finite float WAV whose spectra overflow to a NaN voice
    error = refusal(post(uploads(), encoded([audio], 16_000, "pcm_f32le")))
    assert error["code"] == "invalid_samples" and words in error["message"], error
    assert not any((tmp_path / "voices").iterdir())


def test_max_voices_counts_per_token(uploads) -> None:
    server = uploads(auth_tokens=["alice", "bob"], max_voices=1)
    wav = encoded([as_int16(tone(3.5))], 16_000)
    alice, bob = {"Authorization": "Bearer alice"}, {"Authorization": "Bearer bob"}
    assert post(server, wav, headers=alice).status_code == 201
    refused = post(server, wav, headers=alice)
    assert refused.status_code == 409 and refusal(refused)["code"] == "too_many_voices"
    assert "this token holds max_voices (1)" in refusal(refused)["message"]
    assert post(server, wav, headers=bob).status_code == 201  # alice's voice takes none of bob's quota


def test_without_auth_max_voices_is_one_pool(uploads) -> None:
    server = uploads(max_voices=1)
    wav = encoded([as_int16(tone(3.5))], 16_000)
    assert post(server, wav).status_code == 201
    assert refusal(post(server, wav))["code"] == "too_many_voices"


def test_uploads_past_max_concurrent_voice_uploads_get_503_with_retry_after(uploads) -> None:
    gate = threading.Event()
    engine = _Prompting(gate)
    server = uploads(engine, max_concurrent_voice_uploads=1)
    wav = encoded([as_int16(tone(3.5))], 16_000)

    async def run() -> None:
        async with httpx.AsyncClient(base_url=server.http_url, timeout=20) as client:
            first = asyncio.create_task(client.post("/v1/voices", content=wav))
            assert await asyncio.to_thread(engine.entered.wait, 30)  # the first upload holds the one slot
            # 5.6 MB, still on its way when refused: the answer must reach the client, not a connection reset
            busy = await client.post("/v1/voices", content=encoded([np.tile(as_int16(tone(29.0, 48_000)), (1, 2))],
                                                                   48_000))
            assert busy.status_code == 503 and busy.headers["retry-after"] == "1"
            assert refusal(busy)["code"] == "uploads_busy" and "max_concurrent_voice_uploads" in busy.text
            assert (await client.get("/health")).status_code == 200  # the loop answers meanwhile
            gate.set()
            assert (await first).status_code == 201
            assert (await client.post("/v1/voices", content=wav)).status_code == 201  # the slot is free again

    try:
        asyncio.run(run())
    finally:
        gate.set()


def _trickle(host: str, port: int, head: bytes, rest: bytes, every_s: float = 0.1) -> bytes:
    """Send `head`, then `rest` one byte every `every_s` (a client on a dying link, or an attacker) until the server
    answers; then everything it sends until it closes. A plain socket: once the server closes on a body it did not
    read, the kernel resets the connection, and the answer already received must still be read (asyncio's
    StreamReader raises the reset before handing over what it buffered)."""
    with socket.create_connection((host, port), timeout=30) as sock:
        sock.sendall(head)
        for i in range(len(rest)):
            if select.select([sock], [], [], every_s)[0]:
                break  # the answer has started: stop sending
            sock.sendall(rest[i:i + 1])
        received = b""
        with contextlib.suppress(ConnectionResetError):
            while chunk := sock.recv(65536):
                received += chunk
        return received


def test_a_trickled_body_is_answered_408_and_cut_off(uploads) -> None:
    server = uploads(voice_upload_timeout_s=1.0)
    wav = encoded([as_int16(tone(3.5))], 16_000)
    head = (b"POST /v1/voices HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: audio/wav\r\n"
            b"Content-Length: %d\r\n\r\n" % len(wav) + wav[:44])
    raw = _trickle(server.host, server.port, head, wav[44:])
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 "), raw[:200]
    error = json.loads(body)["error"]
    assert error["code"] == "upload_timeout" and "voice_upload_timeout_s (1 s)" in error["message"]


def test_the_new_limits_are_validated() -> None:
    for bad in (dict(voice_upload_timeout_s=0), dict(max_concurrent_voice_uploads=0)):
        with pytest.raises(ValueError):
            GatewayConfig(**bad)

"""Issue 13 point 11: the per-message cost. Long frames for `asap` clients (what the engine made, up to frame_ms, in
one message; Opus as several packets), Opus in a thread pool, deflate off unless configured, an O(1) writer; each
optimized path checked against its plain reference."""

from __future__ import annotations

import asyncio
import json
import random

import numpy as np
import opuslib
import pytest
import websockets
from support import connect
from voxgate.client.protocol_client import VoxgateClient, split_packets
from voxgate.gateway.audio.frames import AudioFormat, OpusFramer, configure_opus_pool
from voxgate.gateway.protocol import FLAG_LAST, FLAG_PACKETS, PROTOCOL, FrameHeader
from voxgate.gateway.transport.writer import OutFrame, SocketWriter

TEXT = "word " * 30 + "."  # 11.1 s of audio from the fake engine


async def test_asap_long_pcm_frames_carry_what_the_engine_made_bit_for_bit(gateway, fake_engine):
    engine = fake_engine(device_rtf=1000, chunk_ms="320,640,1280")
    server = gateway(engine=engine)
    async with VoxgateClient(server.ws_url, pacing="asap", frame_ms=1280) as client:
        assert client.session["audio"]["frame_ms"] == 1280
        result = await client.speak("a", TEXT)
    headers = [h for h, _, _ in result.frames]
    assert max(h.samples for h in headers) <= 24000 * 1280 // 1000
    assert len(headers) < len(result.audio) / 24000 / 0.32 + 1  # never more messages than engine chunks
    assert headers[-1].flags & FLAG_LAST
    pts = headers[0].pts
    for h in headers:
        assert h.pts == pts
        pts += h.samples
    assert np.array_equal(result.audio, engine.audio_for())


async def test_asap_long_opus_frames_are_packets_that_decode_to_the_engine_audio(gateway, fake_engine):
    engine = fake_engine(device_rtf=1000, chunk_ms=320)
    server = gateway(engine=engine)
    async with VoxgateClient(server.ws_url, codec="opus", pacing="asap", frame_ms=640) as client:
        assert client.session["audio"]["packet_ms"] == 20
        result = await client.speak("o", TEXT)
    headers = [h for h, _, _ in result.frames]
    assert all(h.flags & FLAG_PACKETS for h in headers) and max(h.samples for h in headers) <= 48 * 640
    produced = engine.audio_for().astype(np.float64)
    decoded = result.audio.astype(np.float64)[::2][: len(produced)]  # 48 kHz -> 24 kHz, roughly
    assert abs(len(result.audio) / 2 - len(produced)) < 24 * 40
    corr = np.corrcoef(decoded[2400:-2400], produced[2400 : len(decoded) - 2400])[0, 1]
    assert corr > 0.9, corr


async def test_long_frames_are_for_asap_only(gateway, fake_engine):
    server = gateway(engine=fake_engine())
    ws = await websockets.connect(server.ws_url, subprotocols=[PROTOCOL], compression=None)
    await ws.send(json.dumps({"type": "session.start", "audio": {"frame_ms": 1280}}))
    answer = json.loads(await ws.recv())
    assert answer["code"] == "unsupported" and "asap" in answer["message"]
    await ws.close()


def _random_speechlike(rng: np.random.Generator, n: int) -> np.ndarray:
    t = np.arange(n) / 24000
    tone = np.sin(2 * np.pi * rng.uniform(100, 900) * t) * rng.uniform(2000, 12000)
    return np.clip(tone + rng.normal(0, 800, n), -32768, 32767).astype(np.int16)


async def test_pooled_opus_encoding_equals_inline_and_long_frames_hold_the_same_packets():
    rng = np.random.default_rng(random.randrange(2**32))
    chunks = [_random_speechlike(rng, int(rng.integers(100, 30000))) for _ in range(12)]

    async def encode(fmt: AudioFormat, pool: int) -> list:
        configure_opus_pool(pool)
        try:
            framer = OpusFramer(fmt)
            out = []
            for chunk in chunks:
                out += await framer.encode(chunk)
            return out + framer.cut()
        finally:
            configure_opus_pool(0)

    inline = await encode(AudioFormat("opus", 48000, 20), 0)
    pooled = await encode(AudioFormat("opus", 48000, 20), 2)
    packed = await encode(AudioFormat("opus", 48000, 1280), 2)
    assert [f.payload for f in pooled] == [f.payload for f in inline]  # the reference: encoded on the loop
    assert [p for f in packed for p in split_packets(f.payload)] == [f.payload for f in inline]
    assert sum(f.samples for f in packed) == sum(f.samples for f in inline)
    decoder = opuslib.Decoder(48000, 1)
    assert all(len(decoder.decode(p, 960)) == 1920 for f in packed for p in split_packets(f.payload))


async def test_deflate_is_off_unless_configured(gateway, fake_engine):
    for enabled in (False, True):
        server = gateway(engine=fake_engine(), ws_deflate=enabled)
        ws = await websockets.connect(server.ws_url, subprotocols=[PROTOCOL], compression="deflate")
        negotiated = ws.response.headers.get("Sec-WebSocket-Extensions") or ""
        assert ("permessage-deflate" in negotiated) is enabled
        await ws.close()
    ws, _ = await connect(server.ws_url, pacing={"mode": "asap"})  # still serves with deflate on
    await ws.close()


@pytest.mark.parametrize("deflate", [False, True])
async def test_binary_frames_of_every_length_class_arrive_intact(gateway, fake_engine, deflate):
    # Every WebSocket length encoding (7-bit, 16-bit, 64-bit: mu-law 10 ms is 104 bytes, 1,280 ms of PCM 61 kB at
    # 24 kHz and 123 kB at 48 kHz) through the writer's direct path, with and without deflate.
    engine = fake_engine(device_rtf=1000, chunk_ms="320,640,1280")
    server = gateway(engine=engine, ws_deflate=deflate)
    for codec, rate, frame_ms, lengths in (("mulaw", 8000, 10, range(126)),
                                           ("pcm_s16le", 24000, 1280, range(126, 65536)),
                                           ("pcm_s16le", 48000, 1280, range(65536, 2**20))):
        before = len(engine.audio_for())
        async with VoxgateClient(server.ws_url, pacing="asap", codec=codec, sample_rate=rate,
                                 frame_ms=frame_ms) as client:
            result = await client.speak("a", TEXT)
        made = engine.audio_for()[before:]
        bytes_per_sample = 1 if codec == "mulaw" else 2
        assert max(len(payload) for _, payload, _ in result.frames) + 24 in lengths
        assert all(len(payload) == h.samples * bytes_per_sample for h, payload, _ in result.frames)
        assert len(result.audio) == len(made) * rate // 24000
        if rate == 24000:
            assert np.array_equal(result.audio, made)


class _Owner:
    cancelled = False


async def test_the_writer_counts_its_frames_like_a_recount():
    sent: list[bytes] = []

    async def send_bytes(data: bytes) -> None:
        sent.append(data)

    async def send_text(_text: str) -> None:
        return None

    writer = SocketWriter(send_bytes, send_text, 1000, lambda *_: None)
    owners = [_Owner() for _ in range(4)]
    rng = random.Random()
    for _ in range(300):
        op = rng.random()
        owner = rng.choice(owners)
        if op < 0.6:
            await writer.put_frame(OutFrame(owner, 0, 0, 1, 0, 480, 0, b"\0" * 960))
        elif op < 0.8:
            writer.put_event({"type": "x"}, owner)
        else:
            writer.withdraw(owner)
        recount = sum(isinstance(i, OutFrame) for i in writer._ordered)
        assert writer.queued_frames == recount
    task = asyncio.create_task(writer.run())
    while writer._ordered:
        await asyncio.sleep(0.001)
    assert writer.queued_frames == 0
    assert [FrameHeader.unpack(d).seq for d in sent] == list(range(len(sent)))
    task.cancel()


@pytest.mark.parametrize("frame_ms", [10, 20, 40, 60])
def test_short_frames_keep_their_exact_length(frame_ms):
    from voxgate.gateway.audio.frames import make_encoder

    enc = make_encoder(AudioFormat(frame_ms=frame_ms))
    frames = enc.push(np.zeros(24000, np.int16)) + enc.cut()
    assert all(f.samples == 24 * frame_ms for f in frames[:-1]) and 0 < frames[-1].samples <= 24 * frame_ms

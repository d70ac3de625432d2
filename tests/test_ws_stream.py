"""Ordering, framing and payload guarantees of /v1/tts/ws against a real server (docs/protocol.md)."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import opuslib
import pytest
from support import connect
from voxgate.client.protocol_client import VoxgateClient
from voxgate.engine.base import EngineError
from voxgate.engine.fake import FakeEngine
from voxgate.gateway.protocol import FLAG_CODEC_RESET, FLAG_FIRST, FLAG_LAST, FrameHeader

TEXT = ("The birch canoe slid on the smooth planks. Glue the sheet to the dark blue background. "
        "It is easy to tell the depth of a well.")


def check_order(messages: list, frames_by_ctx: dict) -> None:
    """context.started before frames; flushed/done/cancelled after the last frame; pts contiguous; a started
    context's last frame, and only it, has LAST."""
    started: dict[int, int] = {}
    closed: set[int] = set()
    last_end: dict[int, int] = {}
    for item in messages:
        if isinstance(item, bytes):
            h = FrameHeader.unpack(item)
            assert h.ctx in started, "frame before context.started"
            assert h.ctx not in closed, "frame after done/cancelled"
            assert h.pts == last_end.get(h.ctx, started[h.ctx]), "pts not contiguous"
            last_end[h.ctx] = h.pts + h.samples
            frames_by_ctx.setdefault(h.ctx, []).append(item)
        elif item["type"] == "context.started":
            started[item["ctx"]] = item["start_pts"]
        elif item["type"] in ("context.done", "context.cancelled"):
            closed.add(item["ctx"])
            if item["ctx"] in started:
                lasts = [FrameHeader.unpack(f).flags & FLAG_LAST for f in frames_by_ctx.get(item["ctx"], [])]
                assert lasts and lasts[-1] and not any(lasts[:-1]), f"LAST flags {lasts} of ctx {item['ctx']}"
            if item["type"] == "context.done":
                assert item["end_pts"] == last_end.get(item["ctx"], started[item["ctx"]])


async def collect_until(ws, kind: str, context_id: str, timeout: float = 20.0) -> list:
    out: list = []
    while True:
        raw = await asyncio.wait_for(ws.recv(), timeout)
        out.append(raw if isinstance(raw, bytes) else json.loads(raw))
        if isinstance(raw, str) and out[-1]["type"] == kind and out[-1].get("context_id") == context_id:
            return out


async def test_pcm_frames_equal_engine_output_bit_for_bit(gateway):
    server = gateway()
    ws, started = await connect(server.ws_url, pacing={"mode": "asap"})
    assert started["audio"] == {"codec": "pcm_s16le", "sample_rate": 24000, "frame_ms": 20, "channels": 1}
    await ws.send(json.dumps({"type": "text.append", "context_id": "a", "text": TEXT}))
    await ws.send(json.dumps({"type": "context.end", "context_id": "a"}))
    messages = await collect_until(ws, "context.done", "a")
    await ws.close()
    frames: dict = {}
    check_order(messages, frames)
    ((_, ctx_frames),) = frames.items()
    headers = [FrameHeader.unpack(f) for f in ctx_frames]
    assert headers[0].flags & FLAG_FIRST and headers[-1].flags & FLAG_LAST
    assert all(h.samples == 480 for h in headers[:-1]) and 0 < headers[-1].samples <= 480
    assert [h.seq for h in headers] == list(range(headers[0].seq, headers[0].seq + len(headers)))
    received = np.concatenate([np.frombuffer(f[24:], "<i2") for f in ctx_frames])
    produced = server.server.config.app.state.voxgate.engine.audio_for()
    assert len(received) == len(produced) > 24000
    assert np.array_equal(received, produced)
    done = messages[-1]
    assert done["usage"]["chars"] == len(TEXT)
    assert done["usage"]["audio_ms"] == pytest.approx(len(produced) / 24, abs=0.01)
    assert done["timing"]["first_audio_ms"] is not None and done["timing"]["first_audio_ms"] >= 0


async def test_opus_decodes_to_engine_audio_with_the_right_duration(gateway):
    server = gateway()
    async with VoxgateClient(server.ws_url, codec="opus", pacing="asap") as client:
        head = client.session["audio"]
        assert head["sample_rate"] == 48000 and head["pre_skip"] == 312 and head["bitrate"] == 64000
        result = await client.speak("o", TEXT)
    produced = server.server.config.app.state.voxgate.engine.audio_for().astype(np.float64)
    headers = [h for h, _, _ in result.frames]
    assert headers[0].flags & (FLAG_FIRST | FLAG_CODEC_RESET) == FLAG_FIRST | FLAG_CODEC_RESET
    assert headers[0].samples == 960 - 312 and all(h.samples == 960 for h in headers[1:])
    # Independent decode with libopus, pre-skip trimmed; compare with the engine audio upsampled to 48 kHz.
    decoder = opuslib.Decoder(48000, 1)
    decoded = np.concatenate([np.frombuffer(decoder.decode(p, 960), np.int16) for _, p, _ in result.frames])[312:]
    done = result.event("context.done")
    assert len(decoded) == done["end_pts"] - result.event("context.started")["start_pts"]
    assert 2 * len(produced) <= len(decoded) < 2 * len(produced) + 960 * 2  # padded to the packet, plus the tail
    import soxr

    reference = soxr.resample(produced, 24000, 48000)
    got = decoded[: len(reference)].astype(np.float64)
    snr = 10 * np.log10(np.sum(reference**2) / np.sum((got - reference) ** 2))
    assert snr > 15, f"Opus decode too far from the engine audio: SNR {snr:.1f} dB"
    assert np.array_equal(result.audio[: len(reference)], decoded[: len(reference)].astype(np.int16))


async def test_flush_answers_after_its_last_frame_and_contexts_queue_on_a_track(gateway):
    server = gateway()
    ws, _ = await connect(server.ws_url, pacing={"mode": "asap"})
    await ws.send(json.dumps({"type": "text.append", "context_id": "a", "text": "First part without an end"}))
    await ws.send(json.dumps({"type": "context.flush", "context_id": "a", "flush_id": "f1"}))
    await ws.send(json.dumps({"type": "text.append", "context_id": "b", "text": "Second context."}))
    await ws.send(json.dumps({"type": "context.end", "context_id": "b"}))
    messages = await collect_until(ws, "flushed", "a")
    await ws.send(json.dumps({"type": "text.append", "context_id": "a", "text": "and the rest."}))
    await ws.send(json.dumps({"type": "context.end", "context_id": "a"}))
    messages += await collect_until(ws, "context.done", "a")
    messages += await collect_until(ws, "context.done", "b")
    await ws.close()
    frames: dict = {}
    check_order(messages, frames)
    events = [m for m in messages if isinstance(m, dict)]
    flushed = next(m for m in events if m["type"] == "flushed")
    assert flushed["flush_id"] == "f1"
    a_started = next(m for m in events if m["type"] == "context.started" and m["context_id"] == "a")
    b_started = next(m for m in events if m["type"] == "context.started" and m["context_id"] == "b")
    a_done = next(m for m in events if m["type"] == "context.done" and m["context_id"] == "a")
    # Everything spoken before the flush was sent before `flushed`: its end_pts is where the frames stopped.
    before = [FrameHeader.unpack(m) for m in messages[: messages.index(flushed)] if isinstance(m, bytes)]
    assert flushed["end_pts"] == before[-1].pts + before[-1].samples
    # b queues behind a on track 0: it starts where a ended.
    assert b_started["start_pts"] == a_done["end_pts"] > a_started["start_pts"] == 0


async def test_no_frame_of_a_context_after_its_cancel_ack_under_a_race(gateway, fake_engine):
    # Cancel at many different moments while frames are in flight (asap: the writer queue is full).
    server = gateway(engine=fake_engine(device_rtf=200, chunk_ms=40))
    ws, _ = await connect(server.ws_url, pacing={"mode": "asap"})
    for i in range(12):
        cid = f"c{i}"
        await ws.send(json.dumps({"type": "text.append", "context_id": cid, "text": "word " * 60}))
        await ws.send(json.dumps({"type": "context.end", "context_id": cid}))
        await asyncio.sleep(0.002 * i)
        await ws.send(json.dumps({"type": "context.cancel", "context_id": cid}))
        messages = await collect_until(ws, "context.cancelled", cid)
        ack = messages[-1]
        frames: dict = {}
        check_order(messages, frames)
        ctx = ack["ctx"]
        sent = sum(FrameHeader.unpack(f).samples for f in frames.get(ctx, []))
        if ack["cancel_pts"] is not None:
            started = next(m for m in messages if isinstance(m, dict) and m["type"] == "context.started")
            assert ack["cancel_pts"] == started["start_pts"] + sent
        # Nothing of it may follow the ack: speak a short context and check every frame belongs to it.
        await ws.send(json.dumps({"type": "text.append", "context_id": f"n{i}", "text": "short one"}))
        await ws.send(json.dumps({"type": "context.end", "context_id": f"n{i}"}))
        after = await collect_until(ws, "context.done", f"n{i}")
        assert not any(isinstance(m, bytes) and FrameHeader.unpack(m).ctx == ctx for m in after)
        follower = next(m for m in after if isinstance(m, dict) and m["type"] == "context.started")
        if ack["cancel_pts"] is not None:  # the timeline stays contiguous across a cancel
            assert follower["start_pts"] == ack["cancel_pts"]
    await ws.close()


async def _turn(ws, log: list, cid: str, *messages: dict, until: str = "context.done") -> tuple[list, dict]:
    """Send `messages` about context `cid`, read until its `until`; check the session's whole `log` so far.
    Returns the context's frames (all so far) and the `until` message."""
    for msg in messages:
        await ws.send(json.dumps({"context_id": cid, **msg}))
    log += await collect_until(ws, until, cid)
    frames: dict = {}
    check_order(log, frames)
    ctx = next(m["ctx"] for m in log if isinstance(m, dict) and m.get("context_id") == cid and "ctx" in m)
    return [FrameHeader.unpack(f) for f in frames.get(ctx, [])], log[-1]


@pytest.mark.parametrize("codec", ["pcm_s16le", "opus"])
async def test_every_context_ends_with_a_frame_flagged_last_however_it_ends(gateway, fake_engine, codec):
    server = gateway(engine=fake_engine(device_rtf=20, chunk_ms=40))
    ws, _ = await connect(server.ws_url, pacing={"mode": "asap"}, audio={"codec": codec})
    end, log = {"type": "context.end"}, []
    # Flushed, then ended: its last audio frame went out before the end was known, so an empty frame has LAST.
    # (A missing LAST fails check_order in _turn.)
    await _turn(ws, log, "f", {"type": "text.append", "text": "Spoken before the end"}, {"type": "context.flush"},
                until="flushed")
    frames, done = await _turn(ws, log, "f", end)
    last = frames[-1]
    assert last.flags == FLAG_LAST and last.pts + last.samples == done["end_pts"], last
    if codec == "pcm_s16le":  # (Opus: the end pushes one more packet of silence out of the encoder's lookahead)
        assert last.samples == 0, last
    # No audio at all: one empty frame, FIRST and LAST (and CODEC_RESET for Opus).
    frames, done = await _turn(ws, log, "e", {"type": "context.open"}, end)
    first_last = FLAG_FIRST | FLAG_LAST | (FLAG_CODEC_RESET if codec == "opus" else 0)
    assert [(f.flags, f.samples) for f in frames] == [(first_last, 0)] and done["usage"]["audio_ms"] == 0
    assert done["timing"]["first_audio_ms"] is None
    # The length budget runs out: its last frame has LAST.
    frames, done = await _turn(ws, log, "b", {"type": "context.open", "max_audio_ms": 200},
                               {"type": "text.append", "text": "word " * 30}, end)
    assert frames[-1].flags & FLAG_LAST and 0 < done["usage"]["audio_ms"] <= 260
    # Cancelled while it speaks: an empty LAST frame at cancel_pts, before the ack.
    await _turn(ws, log, "c", {"type": "text.append", "text": "word " * 60}, end, until="context.started")
    frames, cancelled = await _turn(ws, log, "c", {"type": "context.cancel"}, until="context.cancelled")
    assert frames[-1].flags & FLAG_LAST and frames[-1].samples == 0 and frames[-1].pts == cancelled["cancel_pts"]
    await ws.close()


class _RefusingEngine(FakeEngine):
    """Refuses every stream when it opens (after the context has started on its track)."""

    def open_stream(self, request):
        raise EngineError("synthesis_failed", "refused for the test")


async def test_a_context_that_fails_ends_with_last_and_the_sdk_skips_empty_frames(gateway):
    server = gateway(engine=_RefusingEngine())
    ws, _ = await connect(server.ws_url, pacing={"mode": "asap"})
    log: list = []
    frames, _ = await _turn(ws, log, "x", {"type": "context.open"},
                            {"type": "text.append", "text": "Nothing."}, {"type": "context.end"})
    assert [m["code"] for m in log if isinstance(m, dict) and m["type"] == "error"] == ["synthesis_failed"]
    assert [(f.flags & (FLAG_FIRST | FLAG_LAST), f.samples) for f in frames] == [(FLAG_FIRST | FLAG_LAST, 0)]
    await ws.close()
    import voxgate.client

    server = gateway()  # espeak, for audio
    async with voxgate.client.connect(server.ws_url, codec="opus") as tts:  # an empty Opus frame decodes to nothing
        turn = tts.context()
        await turn.send("Flushed first")
        await turn.wait_flushed(await turn.flush())
        await turn.end()
        chunks = [chunk async for chunk in turn]
        assert all(c.samples for c in chunks)
        assert sum(len(c.pcm) for c in chunks) == turn.done["end_pts"] - chunks[0].pts


async def test_clear_cancels_every_context_and_replace_placement(gateway, fake_engine):
    server = gateway(engine=fake_engine(device_rtf=5))
    ws, _ = await connect(server.ws_url)
    for cid in ("x", "y"):
        await ws.send(json.dumps({"type": "text.append", "context_id": cid, "text": "word " * 40}))
    await ws.send(json.dumps({"type": "clear"}))
    acks = set()
    while len(acks) < 2:
        m = json.loads(await asyncio.wait_for(_next_text(ws), 5))
        if m["type"] == "context.cancelled":
            acks.add(m["context_id"])
    await ws.send(json.dumps({"type": "text.append", "context_id": "p", "text": "word " * 40}))
    await ws.send(json.dumps({"type": "context.open", "context_id": "q", "placement": "replace"}))
    m = json.loads(await asyncio.wait_for(_next_text(ws, skip=("context.started",)), 5))
    assert m["type"] == "context.cancelled" and m["context_id"] == "p"
    await ws.close()


async def _next_text(ws, skip=()) -> str:
    while True:
        raw = await ws.recv()
        if isinstance(raw, str) and json.loads(raw)["type"] not in skip:
            return raw


async def test_pcm_resampled_and_mulaw_sessions(gateway):
    server = gateway()
    for audio, codec_id, rate in (({"sample_rate": 16000}, 0, 16000), ({"codec": "mulaw"}, 3, 8000)):
        ws, started = await connect(server.ws_url, audio=audio, pacing={"mode": "asap"})
        assert started["audio"]["sample_rate"] == rate
        await ws.send(json.dumps({"type": "text.append", "context_id": "r", "text": "Resampled speech."}))
        await ws.send(json.dumps({"type": "context.end", "context_id": "r"}))
        messages = await collect_until(ws, "context.done", "r")
        frames: dict = {}
        check_order(messages, frames)
        headers = [FrameHeader.unpack(f) for f in next(iter(frames.values()))]
        assert all(h.codec == codec_id for h in headers)
        assert headers[0].samples == rate // 50
        total = sum(h.samples for h in headers)
        produced = sum(len(c) for c in server.server.config.app.state.voxgate.engine.produced[-1][1])
        assert total == messages[-1]["end_pts"]
        assert total == pytest.approx(produced * rate / 24000, abs=rate // 50)  # resampled, same duration
        await ws.close()


async def test_tcp_nodelay_on_accepted_sockets(gateway):
    import socket

    server = gateway()
    ws, _ = await connect(server.ws_url)
    connections = list(server.server.server_state.connections)
    assert connections
    for protocol in connections:
        sock = protocol.transport.get_extra_info("socket")
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
    await ws.close()

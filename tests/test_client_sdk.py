"""voxgate.client, the Python SDK (docs/client.md), against a real gateway on 127.0.0.1."""

from __future__ import annotations

import asyncio
import itertools
import time

import numpy as np
import pytest
import voxgate.client
from voxgate.client import AudioChunk, StallReport, VoxgateError
from voxgate.gateway.config import GatewayConfig, Limits

TEXT = "The birch canoe slid on the smooth planks. Glue the sheet to the dark blue background."


async def llm_tokens(text: str, delay_s: float = 0.002):
    """What an LLM's stream looks like: word pieces with their spaces, a little apart."""
    for i, word in enumerate(text.split(" ")):
        for piece in (word[:3], word[3:]) if len(word) > 3 else (word,):
            yield piece
            await asyncio.sleep(delay_s)
        yield " " if i < len(text.split(" ")) - 1 else ""


def assert_contiguous(chunks: list[AudioChunk], start: int, end: int) -> None:
    assert chunks and chunks[0].pts == start
    for before, after in itertools.pairwise(chunks):
        assert after.pts == before.end_pts
    assert chunks[-1].end_pts == end


async def test_llm_tokens_come_back_as_ordered_contiguous_chunks(gateway):
    server = gateway()
    async with voxgate.client.connect(server.ws_url) as tts:
        assert tts.session["pacing"]["mode"] == "asap" and tts.sample_rate == 24000
        turn = tts.speak(llm_tokens(TEXT))
        chunks = [chunk async for chunk in turn]
    assert turn.done is not None and turn.error is None
    assert_contiguous(chunks, 0, turn.done["end_pts"])
    assert all(c.pcm.dtype == np.int16 and len(c.pcm) == c.samples for c in chunks)
    assert [c.received_at for c in chunks] == sorted(c.received_at for c in chunks)
    assert chunks[-1].start_s == pytest.approx(chunks[-1].pts / 24000)
    produced = server.server.config.app.state.voxgate.engine.audio_for()
    assert np.array_equal(np.concatenate([c.pcm for c in chunks]), produced)
    assert turn.done["usage"]["chars"] == len(TEXT)  # every token arrived, none dropped by the rate limit


async def test_opus_chunks_are_decoded_pcm_on_the_timeline(gateway):
    server = gateway()
    async with voxgate.client.connect(server.ws_url, codec="opus") as tts:
        turn = tts.speak("Hello there.")
        chunks = [chunk async for chunk in turn]
    assert tts.sample_rate == 48000 and all(len(c.pcm) == c.samples for c in chunks)
    assert chunks[0].samples == 960 - tts.session["audio"]["pre_skip"]
    assert_contiguous(chunks, 0, turn.done["end_pts"])


async def test_turns_follow_each_other_on_the_timeline(gateway):
    server = gateway()
    async with voxgate.client.connect(server.ws_url) as tts:
        first = [c async for c in tts.speak("One sentence.")]
        second = [c async for c in tts.speak(["Another ", "one."])]
        # the turns hold their audio; the protocol client keeps no copy that would grow with a long session
        assert all(not r.pcm and not r.frames for r in tts.client.by_handle.values())
    assert second[0].pts == first[-1].end_pts


async def test_flush_speaks_the_text_before_the_turn_ends(gateway):
    server = gateway()
    async with voxgate.client.connect(server.ws_url) as tts:
        turn = tts.context()
        await turn.send("no sentence end in")
        await turn.send(" this text")
        flushed_at = await turn.wait_flushed(await turn.flush())
        before: list[AudioChunk] = []
        async for chunk in turn:
            before.append(chunk)
            if chunk.end_pts == flushed_at:
                break
        assert turn.done is None  # spoken, and the turn is still open
        await turn.send("and then the rest.")
        await turn.end()
        after = [chunk async for chunk in turn]
    assert_contiguous(before, 0, flushed_at)
    assert_contiguous(after, flushed_at, turn.done["end_pts"])


@pytest.mark.slow
async def test_cancel_stops_the_audio_of_the_turn(gateway, fake_engine):
    # The fake engine makes audio at 2x real time: a long text is still being made when the cancel goes.
    server = gateway(engine=fake_engine(device_rtf=2, chunk_ms=160))
    async with voxgate.client.connect(server.ws_url) as tts:
        turn = tts.speak(llm_tokens("word " * 60))
        seen = 0
        async for _ in turn:
            seen += 1
            if seen == 5:
                break
        await turn.cancel()
        cancelled_at = time.monotonic()
        assert turn.cancelled is not None and turn.done is None
        assert [c async for c in turn] == []  # nothing more, not even what was queued
        result = tts.client.contexts[turn.context_id]
        assert not [f for f in result.frames if f[2] > cancelled_at]
        await asyncio.sleep(0.3)
        assert not [f for f in result.frames if f[2] > cancelled_at]  # none came later either
        again = await tts.speak("Still talking.").audio()  # the session goes on
    assert len(again) > 0
    assert not [e for e in tts.errors if e["type"] == "error"]


def _contexts_active(http_url: str) -> float:
    import urllib.request

    text = urllib.request.urlopen(f"{http_url}/metrics", timeout=5).read().decode()
    return float(next(line.split()[-1] for line in text.splitlines() if line.startswith("voxgate_contexts_active ")))


async def test_a_cancel_that_crosses_the_turns_end_ends_it_as_done(gateway):
    """Barge-in as the turn ends: the server has sent all of its audio (its context is no longer active there) but
    the client has not read the end yet. The server answers the cancel with unknown_context ahead of the audio
    still queued; the turn ends at its context.done, no error, nothing more yielded, and the session goes on."""
    server = gateway(writer_queue_frames=100_000)  # the whole turn fits in the writer's queue, not in the socket
    async with voxgate.client.connect(server.ws_url) as tts:
        turn = tts.speak("A turn long enough to fill the socket's buffers. " * 60)
        async for _ in turn:
            break
        # Hold this event loop (no await) until the server has finished the context: what it sent stays unread.
        deadline = time.monotonic() + 60  # a hang guard only
        while _contexts_active(server.http_url) > 0:
            assert time.monotonic() < deadline, "the server never finished the turn"
            time.sleep(0.01)
        await turn.cancel()
        assert turn.error is None and turn.done is not None and turn.cancelled is None
        assert [c async for c in turn] == []  # the chunks queued behind the cancel are dropped
        assert [e["code"] for e in tts.errors if e["type"] == "error"] == ["unknown_context"]  # seen, not raised
        assert len(await tts.speak("Still talking.").audio()) > 0


async def test_cancel_of_a_turn_that_has_not_started_needs_no_server(gateway):
    server = gateway()
    async with voxgate.client.connect(server.ws_url) as tts:
        turn = tts.context()
        await turn.cancel()
        assert [c async for c in turn] == []
        with pytest.raises(RuntimeError):
            await turn.send("too late")


async def test_a_bad_voice_raises_the_servers_code(gateway):
    server = gateway()
    with pytest.raises(VoxgateError) as refused:
        async with voxgate.client.connect(server.ws_url, voice="no-such-voice"):
            pass
    assert refused.value.code == "voice_not_found" and "no-such-voice" in refused.value.message
    async with voxgate.client.connect(server.ws_url) as tts:
        turn = tts.speak("Hello there.", voice="no-such-voice")
        with pytest.raises(VoxgateError) as failed:
            await turn.audio()
        assert failed.value.code == "voice_not_found" and failed.value.context_id == turn.context_id
        assert len(await tts.speak("Hello there.").audio()) > 0  # the session is fine


async def test_a_wrong_token_raises_unauthorized_not_a_bare_close(gateway):
    server = gateway(config=GatewayConfig(auth_tokens=["s3cret"]))
    for _ in range(3):  # the refusal races session.start: the server may close before it reads it
        with pytest.raises(VoxgateError) as refused:
            async with voxgate.client.connect(server.ws_url, token="wrong"):
                pass
        assert (refused.value.code, refused.value.close_code) == ("unauthorized", 4001)
    async with voxgate.client.connect(server.ws_url, token="s3cret") as tts:
        assert len(await tts.speak("Hi.").audio()) > 0


async def test_a_failing_token_source_raises_in_the_consumer(gateway):
    server = gateway()

    async def broken():
        yield "Hello "
        raise ValueError("the LLM went away")

    async with voxgate.client.connect(server.ws_url) as tts:
        with pytest.raises(ValueError, match="went away"):
            await tts.speak(broken()).audio()


@pytest.mark.slow
async def test_stalls_reach_the_caller(gateway, fake_engine):
    # 0.8 s of audio per second: a listener playing in real time starves; the server names the cause.
    server = gateway(engine=fake_engine(device_rtf=0.8, chunk_ms=320))
    reports: list[StallReport] = []
    async with voxgate.client.connect(server.ws_url, pacing="client_clock", target_buffer_ms=100,
                                      on_stall=reports.append) as tts:
        turn = tts.speak("word " * 8)
        await turn.audio()
        await tts.client.player.drained()  # the stalls it had are reported by then
    assert reports and reports == turn.stalls
    assert {r.cause for r in reports} <= {"generation", "pacing", "network", "client"}, reports
    assert all(r.duration_ms > 0 for r in reports)
    # Most of the silence is named as the engine's starvation. On loaded cores a stall at the edge of a chunk's
    # arrival can be named otherwise: a client late to play adds `client`; and when the chunk was made just before
    # the server's estimate of the moment the listener ran dry (an estimate from the reports' timing) but sent just
    # after it, that stall reads `pacing`.
    generation_ms = sum(r.duration_ms for r in reports if r.cause == "generation")
    assert generation_ms >= 0.5 * sum(r.duration_ms for r in reports), reports


def test_speak_sync_returns_the_whole_audio(gateway):
    server = gateway()
    speech = voxgate.client.speak_sync(server.ws_url, TEXT)
    produced = server.server.config.app.state.voxgate.engine.audio_for()
    assert speech.sample_rate == 24000 and np.array_equal(speech.pcm, produced)
    assert speech.duration_s == pytest.approx(speech.done["usage"]["audio_ms"] / 1000, abs=0.001)


async def test_turns_of_one_session_keep_within_its_message_limit(gateway):
    """Four LLM-fed turns of one session at once send some 200 messages a second (50 a turn, coalesced); under a
    limit of 20 the server dropped what came past its burst (`rate_limited`), text among it. The client waits for
    the limit instead (message_pacer.py): every turn's every character arrives and no error comes (without it a
    turn whose context.end was dropped waited for ever)."""
    server = gateway(limits=Limits(max_messages_per_s=20.0))
    text = " ".join([TEXT] * 3)
    async with voxgate.client.connect(server.ws_url) as tts:
        assert tts.session["limits"]["max_messages_per_s"] == 20.0
        turns = [tts.speak(llm_tokens(text, delay_s=0.004)) for _ in range(4)]

        async def drain(turn):
            return [chunk async for chunk in turn]

        async with asyncio.timeout(30):  # a dropped context.end left its turn waiting for ever
            await asyncio.gather(*(drain(t) for t in turns))
        assert tts.errors == [], tts.errors
    assert all(t.error is None and t.done["usage"]["chars"] == len(text) for t in turns)

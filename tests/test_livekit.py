"""voxgate.integrations.livekit through LiveKit Agents' own TTS API (stream, push_text, flush, end_input, aclose,
synthesize), against a real gateway on 127.0.0.1. No LiveKit server: the TTS API needs none."""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import subprocess
import sys

import httpx
import numpy as np
import pytest

# CI installs voxgate[test], which has it: there (CI=true) a missing livekit-agents fails the imports below
if os.environ.get("CI") != "true":
    pytest.importorskip("livekit.agents", reason="livekit-agents is not installed (pip install -e '.[livekit]')")

from livekit.agents import APIConnectionError, APIConnectOptions, APIStatusError
from livekit.agents.tts import SynthesizedAudio
from voxgate.integrations.livekit import TTS

TEXT = "The birch canoe slid on the smooth planks. Glue the sheet to the dark blue background."
NO_RETRY = APIConnectOptions(max_retry=0, timeout=5)


def tokens(text: str) -> list[str]:
    """An LLM's stream: words with their spaces."""
    return [word + " " for word in text.split(" ")]


async def events_of(stream) -> list[SynthesizedAudio]:
    return [event async for event in stream]


async def streamed(tts: TTS, text: str) -> list[SynthesizedAudio]:
    """One segment: `text` pushed as an LLM's tokens, then end_input; its events, the stream closed."""
    stream = tts.stream()
    for token in tokens(text):
        stream.push_text(token)
    stream.end_input()
    events = await events_of(stream)
    await stream.aclose()
    return events


def pcm_of(events: list[SynthesizedAudio]) -> np.ndarray:
    return np.concatenate([np.frombuffer(e.frame.data, np.int16) for e in events])


def assert_engine_audio(pcm: np.ndarray, server, text: str) -> None:
    """`pcm` is what the engine made for the sentences of `text`, in order, nothing missing or repeated (so the
    frames were contiguous); the framework may end a segment with its 10 ms silent marker frame."""
    produced = server.server.config.app.state.voxgate.engine.audio_for(lambda request: request.text.strip() in text)
    assert len(produced) > 0 and np.array_equal(pcm[:len(produced)], produced)
    assert len(pcm) - len(produced) in (0, 240) and not pcm[len(produced):].any()


async def test_pushed_text_comes_back_as_ordered_contiguous_frames(gateway):
    server = gateway()
    async with TTS(url=server.ws_url, voice="en-us") as tts:
        assert tts.capabilities.streaming and tts.sample_rate == 24000 and tts.num_channels == 1
        events = await streamed(tts, TEXT)
    assert all(e.frame.sample_rate == 24000 and e.frame.num_channels == 1 for e in events)
    assert len({e.request_id for e in events}) == 1 and len({e.segment_id for e in events}) == 1
    assert [e.is_final for e in events] == [False] * (len(events) - 1) + [True]
    assert_engine_audio(pcm_of(events), server, TEXT)
    duration = sum(e.frame.duration for e in events)
    assert 3.0 < duration < 9.0  # espeak speaks these 16 words in about 5 s


async def test_flush_ends_the_segment_and_each_segment_has_its_id(gateway):
    server = gateway()
    async with TTS(url=server.ws_url) as tts:
        ids = []
        for text in ("Hello there, no sentence end", "Another one."):
            stream = tts.stream()
            stream.push_text(text)
            stream.flush()
            events = []
            async for event in stream:  # the segment is spoken and ends before end_input: flush ended it
                events.append(event)
                if event.is_final:
                    break
            stream.end_input()
            assert await events_of(stream) == []
            await stream.aclose()
            assert_engine_audio(pcm_of(events), server, text)
            ids.append((events[0].segment_id, events[0].request_id))
        assert len(tts._pool._connections) == 1  # the second stream reused the first one's session
    assert len({segment for segment, _ in ids}) == 2 and len({request for _, request in ids}) == 2


async def test_synthesize_returns_the_whole_text(gateway):
    server = gateway()
    async with TTS(url=server.ws_url) as tts:
        frame = await tts.synthesize(TEXT).collect()
    assert frame.sample_rate == 24000 and frame.num_channels == 1
    assert_engine_audio(np.frombuffer(frame.data, np.int16), server, TEXT)


async def test_a_language_without_a_voice_speaks(gateway):
    """LiveKit's `language="en"` and no voice: espeak's English voice speaks, streamed and whole."""
    server = gateway()
    async with TTS(url=server.ws_url, language="en") as tts:
        events = await streamed(tts, TEXT)
        frame = await tts.synthesize("Hello there.", conn_options=NO_RETRY).collect()
    assert_engine_audio(pcm_of(events), server, TEXT)
    assert frame.duration > 0.3
    requests = [request for request, _ in server.server.config.app.state.voxgate.engine.produced]
    assert requests and {(r.voice, r.language) for r in requests} == {(None, "en-us")}


@pytest.mark.slow
async def test_aclose_mid_stream_cancels_the_context_on_the_gateway(gateway, fake_engine):
    # The fake engine makes audio at 2x real time: a long text is still being made when aclose comes.
    server = gateway(engine=fake_engine(device_rtf=2, chunk_ms=160))
    async with TTS(url=server.ws_url) as tts:
        stream = tts.stream()
        stream.push_text("word " * 60)
        stream.end_input()
        seen = 0
        async for _ in stream:
            seen += 1
            if seen == 3:
                break
        await stream.aclose()
        assert await events_of(stream) == []
        metrics = httpx.get(server.http_url + "/metrics").text
        assert re.search(r'voxgate_contexts_total\{outcome="cancelled"\} 1\.0', metrics)
        # The session was kept (the cancel was acknowledged) and the next segment is exactly its own audio:
        # nothing of the cancelled context leaks into it.
        again = tts.stream()
        again.push_text("Still talking.")
        again.end_input()
        events = await events_of(again)
        await again.aclose()
        assert len(tts._pool._connections) == 1
    assert_engine_audio(pcm_of(events), server, "Still talking.")


async def test_a_bad_voice_raises_the_frameworks_error_with_the_code(gateway):
    server = gateway()
    async with TTS(url=server.ws_url, voice="no-such-voice") as tts:
        stream = tts.stream(conn_options=NO_RETRY)
        stream.push_text("Hello there.")
        stream.end_input()
        with pytest.raises(APIStatusError) as refused:
            await events_of(stream)
        await stream.aclose()
        with pytest.raises(APIStatusError) as refused_whole:
            await tts.synthesize("Hello there.", conn_options=NO_RETRY).collect()
    for error in (refused.value, refused_whole.value):
        assert error.status_code == 404 and not error.retryable
        assert error.message.startswith("voxgate voice_not_found: ") and "no-such-voice" in error.message
        assert "\n" not in str(error)


async def test_no_gateway_is_a_connection_error(unused_tcp_port):
    async with TTS(url=f"ws://127.0.0.1:{unused_tcp_port}/v1/tts/ws") as tts:
        stream = tts.stream(conn_options=NO_RETRY)
        stream.push_text("Hello.")
        stream.end_input()
        with pytest.raises(APIConnectionError, match=r"voxgate at ws://127\.0\.0\.1:"):
            await asyncio.wait_for(events_of(stream), 5)
        await stream.aclose()


@pytest.mark.slow
def test_importing_voxgate_does_not_import_livekit():
    code = "import sys, voxgate.client, voxgate.gateway.app, voxgate.integrations; print('livekit' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "False"


async def test_the_token_is_sent_and_a_wrong_one_is_refused_with_the_code(gateway):
    server = gateway(auth_tokens=["sesame"])
    async with TTS(url=server.ws_url, token="wrong") as tts:
        with pytest.raises(APIStatusError) as refused:
            await tts.synthesize("Hello.", conn_options=NO_RETRY).collect()
    assert refused.value.status_code == 401 and refused.value.message.startswith("voxgate unauthorized: ")
    async with TTS(url=server.ws_url, token="sesame") as tts:
        assert (await tts.synthesize("Hello.").collect()).duration > 0.3


async def test_word_timestamps_come_as_aligned_transcripts_before_their_audio(gateway):
    from livekit.agents.types import USERDATA_TIMED_TRANSCRIPT

    server = gateway()  # espeak measures its words
    async with TTS(url=server.ws_url, voice="en-us", word_timestamps=True) as tts:
        assert tts.capabilities.aligned_transcript
        events = await streamed(tts, TEXT)
    heard = 0.0  # seconds of the segment's audio before each event's frame
    words = []
    for event in events:
        for timed in event.frame.userdata.get(USERDATA_TIMED_TRANSCRIPT, []):
            assert timed.start_time >= heard - 0.001  # it came with the frame that holds its start, or before
            words.append(timed)
        heard += event.frame.duration
    assert "".join(words).split() == TEXT.split()
    assert [w.start_time for w in words] == sorted(w.start_time for w in words) and words[0].start_time == 0.0
    assert all(a.end_time == b.start_time for a, b in itertools.pairwise(words))

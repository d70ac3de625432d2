"""Issue 12 point 5, the gateway side: every engine stream is told how much audio its listener holds (sent and not
played, plus made and not sent), on each chunk and on each playback report; for `asap` clients the played part
runs on the wall clock from the first audio."""

from __future__ import annotations

import time

import pytest
from support import RecordingEngine, RecordingStream
from voxgate.client.protocol_client import VoxgateClient
from voxgate.engine.base import AudioStream, SynthesisRequest
from voxgate.engine.fake import FakeEngine


class HintedStream(RecordingStream):
    def __init__(self, inner: AudioStream, sink: list, hints: list) -> None:
        super().__init__(inner, sink)
        self.hints = hints

    def report_playback(self, buffered_s: float) -> None:
        made = sum(len(c) for c in self._sink) / 24000
        self.hints.append((time.monotonic(), buffered_s, made))


class HintRecordingEngine(RecordingEngine):
    """A recording stub: keeps each stream's hints with their arrival times."""

    def __init__(self, inner) -> None:
        super().__init__(inner)
        self.hints: list[list[tuple[float, float, float]]] = []

    def open_stream(self, request: SynthesisRequest) -> AudioStream:
        sink: list = []
        hints: list = []
        self.produced.append((request, sink))
        self.hints.append(hints)
        return HintedStream(self.inner.open_stream(request), sink, hints)


@pytest.mark.slow
@pytest.mark.parametrize("pacing", ["client_clock", "realtime"])
async def test_every_stream_gets_sane_playback_hints(gateway, pacing):
    # The engine makes 4x real time: a paced listener's holding stays near the target plus what is made and not
    # sent (bounded by synthesis running at most 20 s ahead).
    engine = HintRecordingEngine(FakeEngine(device_rtf=4, chunk_ms=200, first_chunk_ms=0))
    server = gateway(engine=engine)
    async with VoxgateClient(server.ws_url, pacing=pacing, target_buffer_ms=150) as client:
        t0 = time.monotonic()
        result = await client.speak("h", "word " * 10)  # 3.7 s of audio
    (hints,) = engine.hints
    chunks = len(engine.produced[0][1])
    assert len(hints) >= chunks  # one at the start and one per chunk at least (plus one per report)
    assert hints[0][1] == 0  # nothing made, nothing sent yet
    for t, buffered, made in hints:
        # Never more than what was made; never less than what was made minus what could have been played.
        assert 0 <= buffered <= made + 0.01
        assert buffered >= made - (t - t0) - 0.05
    assert max(b for _, b, _ in hints) > 0.5  # the engine runs ahead of the listener: hints show it
    assert len(result.audio) == round(10 * 0.37 * 24000)
    if pacing == "client_clock":  # playback reports (every 50 ms) bring hints between chunks too
        assert len(hints) >= chunks + 5


async def test_asap_streams_get_no_hints(gateway):
    """An asap client plays on a clock the server cannot see: a 1x guess from the track's first frame would grow with
    every context spoken faster than real time, and the engine would hold the client's next streams back as "far
    ahead" (the closed-loop benchmark once ran at 1x because of it). The engine's own rule applies instead."""
    engine = HintRecordingEngine(FakeEngine(device_rtf=4, chunk_ms=200, first_chunk_ms=0))
    server = gateway(engine=engine)
    async with VoxgateClient(server.ws_url, pacing="asap") as client:
        await client.speak("a", "word " * 4)
        await client.speak("b", "word " * 4)
    assert [len(h) for h in engine.hints] == [0, 0]

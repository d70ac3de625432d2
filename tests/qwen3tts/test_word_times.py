"""Word times on the Qwen3-TTS engine from the forced aligner (engine option `aligner`; issue 28): a word-times
stream's words come before its audio and, aligned whole (`aligner_group_ms` 0), equal `Aligner.align` of that audio
run on its own; aligned in pieces (the held default), they still come before their audio, in order; not held, a
sentence is aligned whole by default; streams without word times are untouched; a cancel leaves no words; the
gateway says `timestamps: "word"` and sends each `timestamps` event before the frames it describes. Tiny TTS and
aligner checkpoints on the CPU, the real loaders."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from aligner.checkpoint import write_sharp_aligner
from support import connect, cpu_loop_config, running_gateway, slots_free, until
from voxgate.engine.aligner.align import CALL_PARTS, HOST_PARTS, Aligner
from voxgate.engine.aligner.stream import AlignedStream
from voxgate.engine.base import AudioStream, SynthesisRequest
from voxgate.engine.loop import LoopStream
from voxgate.engine.qwen3tts.engine import create_engine
from voxgate.engine.words import WordTime, text_words
from voxgate.gateway.protocol import FrameHeader
from voxgate.gateway.transport.uvicorn_server import BackgroundServer

# max_frames 20: every stream is 1.6 s (random weights rarely stop early); urgent_s 0: chunks as scheduled.
SMALL = dict(device="cpu", dtype="fp32", greedy="true", row_buckets="1,2,4,8", prefill_buckets="32,64",
             max_slots="9", max_positions="400", max_rows="8", chunk_frames="1,2,4", max_frames="20",
             urgent_s="0")
TEXTS = ["The birch canoe slid on the planks.", "Glue the sheet to the dark blue background.",
         "It's easy to tell the depth of a well."]


@pytest.fixture(scope="module")
def aligner_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Times under 20 x 80 ms, so they fall inside these 1.6-s streams instead of at their ends.
    return write_sharp_aligner(tmp_path_factory.mktemp("timed-aligner"), classes=20)


async def _engine(tiny_ckpt: Callable[[str], Path], **kw: Any) -> Any:
    engine = create_engine(model=str(tiny_ckpt("cv06")), **{**SMALL, **kw})
    await engine.start()
    return engine


async def _spoken(stream: AudioStream) -> tuple[np.ndarray, list[list[WordTime]]]:
    """The stream's audio and, after each chunk, the words taken (as the gateway takes them)."""
    chunks, taken = [], []
    async for chunk in stream:
        taken.append(stream.take_words())
        chunks.append(chunk)
    return np.concatenate(chunks), taken


def _check_words(audio: np.ndarray, taken: list[list[WordTime]], text: str, alone: Aligner) -> None:
    words = [w for batch in taken for w in batch]
    assert words and words == taken[0]  # all before the first chunk: a request is one segment
    assert [w.word for w in words] == [w.text for w in text_words(text)]
    assert all(a.start <= b.start and a.end == b.start for a, b in itertools.pairwise(words))
    assert words[-1].end == len(audio)
    assert words == alone.align(audio.astype(np.float32) / 32768.0, text)  # the one-clip path, run separately


@pytest.mark.slow
async def test_words_before_audio_equal_one_clip_alignment_and_plain_streams_untouched(
        tiny_ckpt: Callable[[str], Path], aligner_dir: Path) -> None:
    engine = await _engine(tiny_ckpt, aligner=str(aligner_dir), aligner_group_ms="0")
    try:
        assert engine.supports_word_times and engine.info()["aligner"] == str(aligner_dir)
        solo = {t: (await _spoken(engine.open_stream(SynthesisRequest(t, "ryan"))))[0] for t in TEXTS}
        # One at a time, the steps are the same: with word times the very same audio, only later.
        timed, _ = await _spoken(engine.open_stream(SynthesisRequest(TEXTS[0], "ryan", word_times=True)))
        np.testing.assert_array_equal(timed, solo[TEXTS[0]])
        streams = [engine.open_stream(SynthesisRequest(t, "ryan", word_times=i != 1)) for i, t in enumerate(TEXTS)]
        assert isinstance(streams[0], AlignedStream) and isinstance(streams[2], AlignedStream)
        assert type(streams[1]) is LoopStream  # without word times: the loop's own stream, no hold
        results = await asyncio.gather(*(_spoken(s) for s in streams))
        alone = Aligner.from_pretrained(aligner_dir)
        for i, (text, (audio, taken)) in enumerate(zip(TEXTS, results, strict=True)):
            # Batched with others: the same greedy codes; the codec's batched fp32 sums round 1 LSB apart at most.
            assert len(audio) == len(solo[text]) and np.abs(audio.astype(int) - solo[text]).max() <= 1
            if i == 1:
                assert not any(taken)
            else:
                _check_words(audio, taken, text, alone)
        assert len({w.start for w in results[0][1][0]}) > 1  # the times vary inside the clip
        # /metrics: the aligner's calls and the audio they measured (three segments of 1.6 s, in one or more calls)
        registry = engine.word_aligner.metrics.registry  # (the gateway's registry when served)
        assert registry.get_sample_value("voxgate_engine_aligner_audio_seconds_total") == pytest.approx(3 * 1.6)
        calls = registry.get_sample_value("voxgate_engine_aligner_call_seconds_count")
        assert calls == engine.word_aligner.batches and 2 <= calls <= 3
        assert registry.get_sample_value("voxgate_engine_aligner_segments_per_call_sum") == 3
        # each call's time by part, measured inside the call: within the worker's own timing of it
        parts = [registry.get_sample_value("voxgate_engine_aligner_part_seconds_total", {"part": part})
                 for part in CALL_PARTS]
        busy = registry.get_sample_value("voxgate_engine_aligner_busy_seconds_total")
        assert all(v is not None and v >= 0 for v in parts) and 0 < sum(parts) <= busy
        host_cpu = registry.get_sample_value("voxgate_engine_aligner_host_cpu_seconds_total")
        assert host_cpu is not None and 0 < host_cpu <= sum(parts[: len(HOST_PARTS)]) + 1e-3
    finally:
        await engine.stop()


@pytest.mark.slow
async def test_aligned_in_pieces_every_word_still_comes_before_its_audio(tiny_ckpt: Callable[[str], Path],
                                                                        aligner_dir: Path) -> None:
    """The held default: a sentence aligned in pieces while it is made (engine/aligner/stream.py; which words a piece
    keeps, and their offsets, are tested against known times in tests/aligner/test_progressive.py)."""
    engine = await _engine(tiny_ckpt, aligner=str(aligner_dir), aligner_group_ms="400", aligner_margin_ms="160")
    try:
        solo = (await _spoken(engine.open_stream(SynthesisRequest(TEXTS[1], "ryan"))))[0]
        stream = engine.open_stream(SynthesisRequest(TEXTS[1], "ryan", word_times=True))
        assert isinstance(stream, AlignedStream)
        pieces, taken = [], []
        async for piece in stream:
            taken.append(stream.take_words())
            pieces.append(piece)
        audio = np.concatenate(pieces)
        np.testing.assert_array_equal(audio, solo)  # the same audio, every sample once, in order
        words = [w for batch in taken for w in batch]
        assert [w.word for w in words] == [w.text for w in text_words(TEXTS[1])]
        assert all(a.end <= b.start for a, b in itertools.pairwise(words)) and words[-1].end == len(audio)
        ends = list(itertools.accumulate(len(p) for p in pieces))
        for i, batch in enumerate(taken):  # taken before the piece that holds its start, or with it
            assert all(w.start < ends[-1] and i <= next(j for j, e in enumerate(ends) if w.start < e) for w in batch)
        # 1.6 s of audio: partial clips at 0.4, 0.8 and 1.2 s or so while it is made, then the rest
        assert engine.word_aligner.batches >= 2
    finally:
        await engine.stop()


@pytest.mark.slow
async def test_cancel_while_the_segment_is_made_leaves_no_words(tiny_ckpt: Callable[[str], Path],
                                                                 aligner_dir: Path) -> None:
    engine = await _engine(tiny_ckpt, aligner=str(aligner_dir), max_frames="400", aligner_group_ms="0")
    try:
        stream = engine.open_stream(SynthesisRequest("word " * 30, "ryan", word_times=True))
        assert isinstance(stream, AlignedStream)
        chunks = aiter(stream)
        first = asyncio.ensure_future(anext(chunks))
        inner = stream._inner
        assert isinstance(inner, LoopStream)
        await until(lambda: inner._handed_at is not None, 60, "a chunk made (and held)")
        assert not first.done()  # held: its words are not measured yet
        stream.cancel()
        with pytest.raises(StopAsyncIteration):
            await first
        assert stream.take_words() == [] and engine.word_aligner.batches == 0
        await slots_free(engine)
        # The engine goes on: the next word-times stream is measured.
        _, taken = await _spoken(engine.open_stream(SynthesisRequest("Hello there.", "ryan", word_times=True)))
        assert [w.word for w in taken[0]] == ["Hello", "there."] and engine.word_aligner.batches == 1
    finally:
        await engine.stop()


@pytest.fixture(scope="module")
def server(tiny_ckpt: Callable[[str], Path], aligner_dir: Path) -> Iterator[BackgroundServer]:
    engine = create_engine(model=str(tiny_ckpt("cv06")), aligner=str(aligner_dir), **SMALL)
    with running_gateway(engine, cpu_loop_config()) as srv:
        yield srv


@pytest.mark.slow
async def test_the_gateway_sends_each_words_event_before_its_frames(server: BackgroundServer) -> None:
    ws, started = await connect(server.ws_url, pacing={"mode": "asap"}, defaults={"voice": "ryan"},
                                timestamps="word")
    assert started["timestamps"] == "word" and "timestamps_unavailable" not in started
    rate = started["audio"]["sample_rate"]
    text = " ".join(TEXTS[:2])
    await ws.send(json.dumps({"type": "text.append", "context_id": "a", "text": text}))
    await ws.send(json.dumps({"type": "context.end", "context_id": "a"}))
    received = start_pts = done = None  # the timeline position up to which audio has arrived
    words: list[dict[str, Any]] = []
    while True:
        raw = await asyncio.wait_for(ws.recv(), 120)
        if isinstance(raw, bytes):
            header = FrameHeader.unpack(raw)
            received = header.pts + header.samples
            continue
        msg = json.loads(raw)
        assert msg["type"] != "error", msg
        if msg["type"] == "context.started":
            start_pts = received = msg["start_pts"]
        elif msg["type"] == "timestamps":
            assert start_pts is not None and received is not None
            for word in msg["words"]:  # no frame holding its audio has come yet (start_ms is to 0.1 ms)
                assert start_pts + word["start_ms"] * rate / 1000 >= received - rate / 10_000, (word, received)
            words += msg["words"]
        elif msg["type"] == "context.done":
            done = msg
            break
    await ws.close()
    assert [w["word"] for w in words] == [w.text for w in text_words(text)]
    assert all(a["start_ms"] <= b["start_ms"] for a, b in itertools.pairwise(words))
    # Two sentences, two requests of 20 frames: the first's words end with its audio (1.6 s), the second's are
    # placed on the context's clock after it.
    second = len(text_words(TEXTS[0]))
    assert words[second - 1]["end_ms"] == 1600 <= words[second]["start_ms"] and done["usage"]["audio_ms"] == 3200
    assert words[-1]["end_ms"] == 3200


@pytest.mark.slow
async def test_http_sse_words_come_before_their_deltas_sentence_by_sentence(server: BackgroundServer) -> None:
    text = " ".join(TEXTS[1:])
    async with httpx.AsyncClient(timeout=120) as http:  # non_streaming_mode false: ignored with word times
        response = await http.post(server.http_url + "/v1/audio/speech", json={
            "input": text, "voice": "ryan", "response_format": "pcm", "stream_format": "sse", "timestamps": "word",
            "non_streaming_mode": False})
    assert response.status_code == 200, response.text
    events = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")]
    received = 0  # samples of audio sent so far
    words: list[dict[str, Any]] = []
    for event in events:
        if event["type"] == "speech.audio.delta":
            received += len(base64.b64decode(event["audio"])) // 2
        elif event["type"] == "speech.audio.timestamps":
            assert all(w["start_ms"] * 24 >= received - 2 for w in event["words"]), (event, received)
            words += event["words"]
    assert [w["word"] for w in words] == [w.text for w in text_words(text)]
    # Two sentences, two requests of 20 frames (one stream for the whole input would be 20 frames in all).
    assert received == 2 * 20 * 1920 and words[-1]["end_ms"] == 3200
    # Whole (`stream: false`): one JSON answer, the file and the same words, held or not.
    for hold in (True, False):
        async with httpx.AsyncClient(timeout=120) as http:
            whole = await http.post(server.http_url + "/v1/audio/speech", json={
                "input": text, "voice": "ryan", "response_format": "pcm", "stream": False, "timestamps": "word",
                "timestamps_hold": hold})
        assert whole.status_code == 200 and whole.headers["content-type"] == "application/json", whole.text
        answer = whole.json()
        assert len(base64.b64decode(answer["audio"])) == 2 * 20 * 1920 * 2 and answer["duration_ms"] == 3200
        assert [w["word"] for w in answer["timestamps"]] == [w["word"] for w in words]
        assert answer["timestamps"][-1]["end_ms"] == 3200 and "error" not in answer


@pytest.mark.slow
async def test_with_timestamps_hold_false_the_audio_leads_and_every_word_follows(server: BackgroundServer) -> None:
    """session.start `timestamps_hold: false`: the first frame goes out before any word is measured (nothing held:
    the first aligner clip needs a group of audio made), and the words still all come, in order, each once, on the
    context's clock; the same over HTTP SSE, where the last words may follow the last delta."""
    ws, started = await connect(server.ws_url, pacing={"mode": "asap"}, defaults={"voice": "ryan"},
                                timestamps="word", timestamps_hold=False)
    assert started["timestamps"] == "word" and started["timestamps_hold"] is False
    text = " ".join(TEXTS[:2])
    await ws.send(json.dumps({"type": "text.append", "context_id": "a", "text": text}))
    await ws.send(json.dumps({"type": "context.end", "context_id": "a"}))
    order: list[str] = []
    words: list[dict[str, Any]] = []
    while True:
        raw = await asyncio.wait_for(ws.recv(), 120)
        if isinstance(raw, bytes):
            order.append("audio")
            continue
        msg = json.loads(raw)
        assert msg["type"] != "error", msg
        if msg["type"] == "timestamps":
            order.append("words")
            words += msg["words"]
        elif msg["type"] == "context.done":
            break
    await ws.close()
    assert order[0] == "audio" and "words" in order
    assert [w["word"] for w in words] == [w.text for w in text_words(text)]
    assert all(a["end_ms"] <= b["start_ms"] for a, b in itertools.pairwise(words)) and words[-1]["end_ms"] == 3200
    async with httpx.AsyncClient(timeout=120) as http:
        response = await http.post(server.http_url + "/v1/audio/speech", json={
            "input": text, "voice": "ryan", "response_format": "pcm", "stream_format": "sse", "timestamps": "word",
            "timestamps_hold": False})
    assert response.status_code == 200, response.text
    events = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")]
    kinds = [e["type"] for e in events]
    assert kinds[0] == "speech.audio.delta" and kinds[-1] == "speech.audio.done"
    sse_words = [w for e in events if e["type"] == "speech.audio.timestamps" for w in e["words"]]
    assert [w["word"] for w in sse_words] == [w.text for w in text_words(text)] and sse_words[-1]["end_ms"] == 3200


@pytest.mark.slow
async def test_not_held_a_sentence_is_aligned_whole_in_one_call_held_in_pieces(tiny_ckpt: Callable[[str], Path],
                                                                              aligner_dir: Path) -> None:
    """The defaults split by hold: a held stream's audio waits on its words, so it is aligned in pieces
    (`aligner_group_ms`); a stream not held (its audio out as made) is aligned whole by default
    (`aligner_not_held_group_ms` 0): one call once the sentence is made, its words those of the one-clip path."""
    engine = await _engine(tiny_ckpt, aligner=str(aligner_dir), aligner_group_ms="400", aligner_margin_ms="160")
    try:
        assert engine.options.aligner_not_held_group_ms == 0 and engine.options.aligner_gather_ms == 120
        calls = engine.word_aligner.batches
        audio, taken = await _spoken(engine.open_stream(SynthesisRequest(TEXTS[1], "ryan", word_times=True,
                                                                         word_times_hold=False)))
        assert engine.word_aligner.batches == calls + 1
        words = [w for batch in taken for w in batch]
        assert words == Aligner.from_pretrained(aligner_dir).align(audio.astype(np.float32) / 32768.0, TEXTS[1])
        calls = engine.word_aligner.batches
        await _spoken(engine.open_stream(SynthesisRequest(TEXTS[1], "ryan", word_times=True)))
        assert engine.word_aligner.batches >= calls + 2  # held: pieces while it is made, then the rest
    finally:
        await engine.stop()


@pytest.mark.slow
async def test_a_length_budget_keeps_the_last_words_held_or_not(tiny_ckpt: Callable[[str], Path],
                                                                aligner_dir: Path) -> None:
    """`max_audio_ms` cuts the second sentence 80 ms before its end: the words that start before the cut come, the
    last one ending there, the same held or not (not held, the cut sentence's words are still being aligned when
    its audio reaches the cut). Each sentence is aligned whole (`aligner_group_ms = 0`), so both modes make the same
    aligner calls on the same audio."""
    engine = create_engine(model=str(tiny_ckpt("cv06")), aligner=str(aligner_dir), aligner_group_ms="0", **SMALL)
    text = " ".join(TEXTS[:2])
    heard: dict[bool, list[dict[str, Any]]] = {}
    with running_gateway(engine, cpu_loop_config()) as srv:
        for hold in (True, False):
            ws, _ = await connect(srv.ws_url, pacing={"mode": "asap"}, defaults={"voice": "ryan"},
                                  timestamps="word", timestamps_hold=hold)
            await ws.send(json.dumps({"type": "context.open", "context_id": "a", "max_audio_ms": 3120}))
            await ws.send(json.dumps({"type": "text.append", "context_id": "a", "text": text}))
            await ws.send(json.dumps({"type": "context.end", "context_id": "a"}))
            words, done = await _context_words(ws)
            await ws.close()
            assert done["usage"]["audio_ms"] == 3120
            heard[hold] = words
    first = len(text_words(TEXTS[0]))
    assert len(heard[True]) > first and heard[True][-1]["end_ms"] == 3120  # the cut sentence's words, to the cut
    assert heard[False] == heard[True]


@pytest.mark.slow
async def test_a_first_clause_is_timed_and_spoken_on_its_own(tiny_ckpt: Callable[[str], Path],
                                                             aligner_dir: Path) -> None:
    """word_times_first_clause_words: a word-times turn's first clause is its own request (timed, released) and the
    rest of its sentence the next one; the words still come whole, in order, before their audio."""
    engine = create_engine(model=str(tiny_ckpt("cv06")), aligner=str(aligner_dir), **SMALL)
    text = "The birch canoe, slid on the smooth planks."
    with running_gateway(engine, cpu_loop_config(word_times_first_clause_words=3)) as srv:
        ws, _ = await connect(srv.ws_url, pacing={"mode": "asap"}, defaults={"voice": "ryan"}, timestamps="word")
        await ws.send(json.dumps({"type": "text.append", "context_id": "a", "text": text}))
        await ws.send(json.dumps({"type": "context.end", "context_id": "a"}))
        words, _ = await _context_words(ws)
        await ws.close()
        async with httpx.AsyncClient(timeout=120) as http:  # the same rule at the HTTP door
            response = await http.post(srv.http_url + "/v1/audio/speech", json={
                "input": text, "voice": "ryan", "response_format": "pcm", "stream_format": "sse",
                "timestamps": "word"})
    events = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")]
    sse_words = [w for e in events if e["type"] == "speech.audio.timestamps" for w in e["words"]]
    for heard in (words, sse_words):
        assert [w["word"] for w in heard] == [w.text for w in text_words(text)]
        # Two requests of 20 frames (1.6 s each): "The birch canoe," then the rest of the sentence.
        assert heard[2]["end_ms"] == 1600 <= heard[3]["start_ms"] and heard[-1]["end_ms"] == 3200, heard


async def _context_words(ws: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A context's words from its `timestamps` events, and its `context.done` (no error on the way)."""
    words: list[dict[str, Any]] = []
    while (msg := json.loads(await _next_text(ws)))["type"] != "context.done":
        assert msg["type"] != "error", msg
        words += msg["words"] if msg["type"] == "timestamps" else []
    return words, msg


async def _next_text(ws: Any) -> str:
    while isinstance(raw := await asyncio.wait_for(ws.recv(), 120), bytes):
        pass
    return raw

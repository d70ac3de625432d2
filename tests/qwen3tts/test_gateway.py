"""The gateway in front of the batched Qwen3-TTS loop (tiny checkpoint, CPU): WebSocket and HTTP on a real server,
and `voxgate serve --engine qwen3tts` as a process, so CI drives gateway -> loop -> codec end to end."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import wave
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from support import (
    RecordingEngine,
    connect,
    cpu_loop_config,
    first_audio_stages,
    running_gateway,
    serve_process,
    slots_free,
)
from voxgate.engine.qwen3tts.engine import create_engine
from voxgate.engine.timeline import STAGES
from voxgate.gateway.protocol import FLAG_FIRST, FLAG_LAST, FrameHeader
from voxgate.gateway.transport.uvicorn_server import BackgroundServer

SMALL = dict(device="cpu", dtype="fp32", greedy="true", row_buckets="1,2,4,8", prefill_buckets="32,64",
             max_slots="9", max_positions="400", max_rows="8", chunk_frames="1,2,4")


@pytest.fixture(scope="module")
def server(tiny_ckpt: Callable[[str], Path]) -> Iterator[BackgroundServer]:
    engine = RecordingEngine(create_engine(model=str(tiny_ckpt("cv06")), **SMALL))
    with running_gateway(engine, cpu_loop_config()) as srv:
        yield srv


def _produced(server: BackgroundServer) -> RecordingEngine:
    return server.server.config.app.state.voxgate.engine


async def _speak(server: BackgroundServer, text: str, context_id: str, **start: object) -> tuple[list, dict]:
    ws, _ = await connect(server.ws_url, pacing={"mode": "asap"}, defaults={"voice": "ryan"}, **start)
    await ws.send(json.dumps({"type": "text.append", "context_id": context_id, "text": text}))
    await ws.send(json.dumps({"type": "context.end", "context_id": context_id}))
    frames, done = [], None
    while done is None:
        raw = await asyncio.wait_for(ws.recv(), 60)
        if isinstance(raw, bytes):
            frames.append(raw)
        elif json.loads(raw)["type"] == "context.done":
            done = json.loads(raw)
        elif json.loads(raw)["type"] == "error":
            raise AssertionError(raw)
    await ws.close()
    return frames, done


@pytest.mark.slow
async def test_ws_frames_equal_the_engine_output(server: BackgroundServer) -> None:
    engine = _produced(server)
    before = len(engine.produced)
    text = "Hello from the loop. A second sentence follows."
    frames, done = await _speak(server, text, "a")
    headers = [FrameHeader.unpack(f) for f in frames]
    assert headers[0].flags & FLAG_FIRST and headers[-1].flags & FLAG_LAST
    received = np.concatenate([np.frombuffer(f[24:], "<i2") for f in frames])
    produced = np.concatenate([c for _, chunks in engine.produced[before:] for c in chunks])
    assert np.array_equal(received, produced) and len(produced) >= 2 * 1920
    assert done["usage"]["chars"] == len(text) and done["timing"]["first_audio_ms"] is not None


@pytest.mark.slow
async def test_concurrent_sessions_share_steps_and_each_gets_its_audio(server: BackgroundServer) -> None:
    """Eight sessions at once through the batched loop: each gets complete, ordered audio of its own."""
    texts = [f"Session number {i} speaks now." for i in range(8)]
    results = await asyncio.gather(*(_speak(server, t, f"c{i}") for i, t in enumerate(texts)))
    for frames, done in results:
        pts = [FrameHeader.unpack(f).pts for f in frames]
        assert pts == sorted(pts) and done["usage"]["audio_ms"] >= 160
    metrics = httpx.get(server.http_url + "/metrics", timeout=10).text
    rows = [line for line in metrics.splitlines() if line.startswith("voxgate_engine_rows_per_step_sum")]
    steps = [line for line in metrics.splitlines() if line.startswith("voxgate_engine_steps_total")]
    assert rows and steps and float(rows[0].split()[-1]) > float(steps[0].split()[-1])  # > 1 row a step on average
    assert 'voxgate_engine_step_seconds_count{bucket="' in metrics


async def test_cancel_mid_stream_then_speak_again(server: BackgroundServer) -> None:
    ws, _ = await connect(server.ws_url, pacing={"mode": "asap"}, defaults={"voice": "aiden"})
    await ws.send(json.dumps({"type": "text.append", "context_id": "x", "text": "word " * 60}))
    await ws.send(json.dumps({"type": "context.end", "context_id": "x"}))
    while not isinstance(await asyncio.wait_for(ws.recv(), 60), bytes):
        pass
    await ws.send(json.dumps({"type": "context.cancel", "context_id": "x"}))
    while True:
        raw = await asyncio.wait_for(ws.recv(), 60)
        if isinstance(raw, str) and json.loads(raw)["type"] == "context.cancelled":
            break
    await ws.send(json.dumps({"type": "text.append", "context_id": "y", "text": "After the cancel."}))
    await ws.send(json.dumps({"type": "context.end", "context_id": "y"}))
    while True:
        raw = await asyncio.wait_for(ws.recv(), 60)
        if isinstance(raw, bytes):
            assert FrameHeader.unpack(raw).ctx != 1, "a frame of the cancelled context after its ack"
        elif json.loads(raw)["type"] == "context.done":
            break
    await ws.close()
    await slots_free(_produced(server).inner)  # every slot comes back


async def test_word_timestamps_are_unavailable_without_an_aligner(server: BackgroundServer) -> None:
    # No estimate is passed off as a time: the session says none, and why (issue 28).
    ws, started = await connect(server.ws_url, timestamps="word")
    assert started["timestamps"] == "none" and "forced aligner" in started["timestamps_unavailable"]
    await ws.close()
    async with httpx.AsyncClient(timeout=30) as http:  # over HTTP: refused, with the same reason
        response = await http.post(server.http_url + "/v1/audio/speech", json={
            "input": "Hello.", "stream_format": "sse", "timestamps": "word"})
    error = response.json()["error"]
    assert response.status_code == 400 and (error["code"], error["param"]) == ("unsupported", "timestamps")
    assert "forced aligner" in error["message"]


def test_http_speech_pcm_and_wav(server: BackgroundServer) -> None:
    engine = _produced(server)
    before = len(engine.produced)
    body = {"model": "voxgate", "input": "Over HTTP.", "voice": "ryan", "response_format": "pcm"}
    response = httpx.post(server.http_url + "/v1/audio/speech", json=body, timeout=60)
    assert response.status_code == 200
    produced = np.concatenate([c for _, chunks in engine.produced[before:] for c in chunks])
    assert np.array_equal(np.frombuffer(response.content, "<i2"), produced)
    wav = httpx.post(server.http_url + "/v1/audio/speech", json={**body, "response_format": "wav"}, timeout=60)
    assert wav.status_code == 200 and wav.content[:4] == b"RIFF"
    health = httpx.get(server.http_url + "/health", timeout=10).json()
    assert health["engine_info"]["batching"].startswith("engine loop")


async def test_the_first_audio_timeline_has_every_stage_of_the_loop(server: BackgroundServer) -> None:
    """Through the engine loop a request passes every stage (engine/timeline.py), each once, over both doors."""
    await _speak(server, "Every stage once.", "timeline")
    async with httpx.AsyncClient(base_url=server.http_url, timeout=60) as client:
        body = {"model": "voxgate", "input": "Every stage once.", "voice": "ryan", "response_format": "pcm",
                "stream": True}
        assert (await client.post("/v1/audio/speech", json=body)).status_code == 200
        text = (await client.get("/metrics")).text
    for endpoint in ("ws", "http"):
        stages = first_audio_stages(text, endpoint)
        assert list(stages) == list(STAGES), endpoint
        assert len({count for count, _ in stages.values()}) == 1  # every request has every stage
        assert stages["first_frame"][1] > 0 and stages["codec"][1] > 0
        # a prompt that fits one step makes its first frame in that step: its first frame's step is its prompt's
        assert stages["prefill"][1] == 0, endpoint


@pytest.mark.slow
def test_voxgate_serve_runs_the_loop(tiny_ckpt: Callable[[str], Path], tmp_path: Path) -> None:
    """`voxgate serve --engine qwen3tts --engine-option model=DIR` as a user runs it (the README's path), then
    `voxgate say` with no voice: the checkpoint's English speaker is the default, and English text speaks."""
    options = [f"model={tiny_ckpt('cv17')}", *(f"{k}={v}" for k, v in SMALL.items())]
    engine_options = [arg for opt in options for arg in ("--engine-option", opt)]
    with serve_process(tmp_path / "serve.log", *engine_options, engine="qwen3tts", grace_s=30, timeout_s=120,
                       env={**os.environ, "OMP_NUM_THREADS": "1"}) as served:
        listed = httpx.get(served.http_url + "/v1/voices", timeout=10).json()
        assert listed["default"] == "ryan" and listed["aliases"]["alloy"] == "ryan"
        out = tmp_path / "say.wav"
        say = subprocess.run([sys.executable, "-m", "voxgate.gateway.cli", "say", "Hello from serve.", "--url",
                              served.ws_url, "-o", str(out)],
                             capture_output=True, text=True, timeout=120)
        assert say.returncode == 0, say.stderr
        with wave.open(str(out)) as w:
            assert w.getframerate() == 24000 and w.getnframes() >= 1920

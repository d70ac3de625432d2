"""`non_streaming_mode` of POST /v1/audio/speech on the qwen3tts engine (tiny 1.7B CustomVoice checkpoint, fp32, CPU,
greedy): `false` speaks the whole input through one text stream of the engine loop (one text token a frame), and its
codes equal the reference's `generate(..., non_streaming_mode=False)`; `true` keeps the text-up-front prompt."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from support import cpu_loop_config, running_gateway
from voxgate.engine.qwen3tts.engine import create_engine
from voxgate.gateway.transport.uvicorn_server import BackgroundServer

from .loop_support import RecordingRunner
from .test_parity_generate import TEXT, reference_codes

# The reference's HF generate may emit UserWarnings about unused sampling flags.
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:transformers.*")

SMALL = dict(device="cpu", dtype="fp32", greedy="true", row_buckets="1,2,4", prefill_buckets="64", max_slots="5",
             max_positions="400", max_rows="4", chunk_frames="1,2,4")
FRAMES = 12  # max_new_tokens of each request: its frame budget


@pytest.fixture(scope="module")
def served(tiny_ckpt: Callable[[str], Path]) -> Iterator[tuple[BackgroundServer, Any, RecordingRunner]]:
    engine = create_engine(model=str(tiny_ckpt("cv17")), **SMALL)
    with running_gateway(engine, cpu_loop_config()) as server:
        recorder = RecordingRunner(engine.loop.core.runner)  # after the warm-up: only the tests' streams
        engine.loop.core.runner = recorder
        yield server, engine, recorder


def _speak(server: BackgroundServer, recorder: RecordingRunner, **fields: object) -> tuple[bytes, np.ndarray]:
    """The PCM of one request, and the codes the engine loop made for it."""
    before = set(recorder.codes)
    body = {"model": "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice", "input": TEXT, "voice": "Ryan", "language": "English",
            "max_new_tokens": FRAMES, "response_format": "pcm", **fields}
    response = httpx.post(server.http_url + "/v1/audio/speech", json=body, timeout=120)
    assert response.status_code == 200, response.text
    (request_id,) = set(recorder.codes) - before  # one engine stream for the whole input
    return response.content, np.stack(recorder.codes[request_id])


def _reference(reference: Callable[[str], Any], engine: Any, non_streaming: bool) -> np.ndarray:
    tts = engine.tts
    inputs = tts.prompt_inputs(TEXT, "ryan", "english", non_streaming=non_streaming)
    return reference_codes(reference("cv17"), inputs, tts.cfg.generation.greedy(), FRAMES + 1).numpy()


def test_false_speaks_the_reference_text_per_frame_codes(served: tuple, reference: Callable[[str], Any]) -> None:
    server, engine, recorder = served
    pcm, codes = _speak(server, recorder, non_streaming_mode=False, stream_format="audio")
    want = _reference(reference, engine, non_streaming=False)
    assert codes.shape == want.shape and codes.shape[0] > 0
    np.testing.assert_array_equal(codes, want)
    assert len(pcm) == codes.shape[0] * 1920 * 2  # every frame spoken, nothing else
    # The prompt layout matters on this checkpoint: the text-up-front codes differ.
    assert not np.array_equal(want, _reference(reference, engine, non_streaming=True))


def test_true_keeps_the_text_up_front_codes(served: tuple, reference: Callable[[str], Any]) -> None:
    server, engine, recorder = served
    _, codes = _speak(server, recorder, non_streaming_mode=True)
    np.testing.assert_array_equal(codes, _reference(reference, engine, non_streaming=True))


def test_false_whole_file_equals_the_streamed_audio(served: tuple) -> None:
    """`stream: false` (the whole file at once) takes the same engine path: the same samples as streamed."""
    server, _, recorder = served
    streamed, _ = _speak(server, recorder, non_streaming_mode=False)
    whole, codes = _speak(server, recorder, non_streaming_mode=False, stream=False)
    assert whole == streamed and len(whole) == codes.shape[0] * 1920 * 2


def test_false_refuses_one_sentence_too_long_for_a_stream(served: tuple) -> None:
    """One stream cannot take any length (max_positions 400 here). Many sentences go on in fresh streams cut at
    sentence ends (tests/qwen3tts/test_rollover.py); one sentence longer than a whole stream is one clear 413 naming
    the limit, before any audio."""
    server, _, _ = served
    body = {"input": "and on " * 400 + "and on.", "voice": "ryan", "response_format": "pcm",
            "non_streaming_mode": False}
    response = httpx.post(server.http_url + "/v1/audio/speech", json=body, timeout=60)
    assert response.status_code == 413, response.text
    error = response.json()["error"]
    assert error["code"] == "text_too_long" and "max_positions" in error["message"]

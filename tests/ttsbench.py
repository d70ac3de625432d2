"""nari-labs tts-bench's requests, as its five HTTP targets and its WebSocket mode send them, and a client that reads
the answers the way tts-bench does (aiohttp, as tts-bench; nothing of its code is copied, only the wire facts).

Read from github.com/nari-labs/benchmarks at a2d65e1 (tts_bench/src/tts_bench/):
- targets.py `TARGET_CONTRACTS` and `TargetAdapter.build_request`: every HTTP body is
  `{model, input, voice, language, stream: true, non_streaming_mode: false, response_format}`, plus
  `stream_format: "audio"` for vllm-omni; `response_format` is "wav" for mstar, "pcm" for the others. The content
  types each accepts are `_PCM_CONTENT_TYPES` / `_WAV_CONTENT_TYPES`; sglang-omni also needs an `x-sample-rate`
  header equal to the expected rate.
- cli.py: the defaults, model `Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice`, voice `Ryan`, language `English`, the expected
  format PCM16 mono 24 kHz, the health path `/health`.
- runtime.py `_run_schedule` / `_execute_request`: an aiohttp session with `Accept-Encoding: identity`, each POST to
  `/v1/audio/speech` with `json=` (Content-Type: application/json) and `Accept: audio/wav, audio/pcm,
  application/octet-stream`; a status outside 2xx fails; the body is read as raw PCM16 or as a RIFF/WAVE stream whose
  sizes may be 0xFFFFFFFF (audio.py `PcmStreamDecoder`), and must be non-empty and frame-aligned.
- targets.py `preflight_target`: `GET /health` must answer 2xx before the run.
- runtime.py `execute_websocket` (nari only, `--transport websocket`): the WebSocket exchange in `speak_over_ws`.
"""

from __future__ import annotations

import asyncio
import json
import re
import struct
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import aiohttp
import numpy as np

RATE = 24_000  # cli.py: PcmFormat(sample_rate_hz=24_000)
DEFAULTS = {"model": "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice", "voice": "Ryan", "language": "English"}  # cli.py
PCM_TYPES = frozenset({"audio/pcm", "audio/l16", "application/octet-stream", "audio/raw"})  # targets.py
WAV_TYPES = frozenset({"audio/wav", "audio/x-wav", "application/octet-stream"})  # targets.py
SESSION_HEADERS = {"Accept-Encoding": "identity"}  # runtime.py _run_schedule: the ClientSession's headers
REQUEST_HEADERS = {"Accept": "audio/wav, audio/pcm, application/octet-stream"}  # runtime.py _execute_request
WS_PROTOCOL = "nari.speech.v1"  # targets.py WEBSOCKET_PROTOCOL
WS_AUDIO = {"encoding": "pcm_s16le", "sample_rate": RATE, "channels": 1}  # targets.py validate_websocket_audio
WS_CHUNK_INTERVAL_S = 0.010  # targets.py WEBSOCKET_INPUT_CHUNK_INTERVAL_S


@dataclass(frozen=True)
class Target:
    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any]  # after {model, input, voice, language}, in tts-bench's key order
    content_types: frozenset[str]
    wav: bool = False  # the body is a RIFF/WAVE stream (else raw PCM16)
    rate_header: str | None = None  # a header that must carry the sample rate


_STREAMED = {"stream": True, "non_streaming_mode": False}
# target -> what it sends and what it accepts (targets.py TARGET_CONTRACTS, build_request; runtime.py headers).
TARGETS: dict[str, Target] = {
    "vllm-omni": Target("POST", "/v1/audio/speech", REQUEST_HEADERS,
                        {**_STREAMED, "response_format": "pcm", "stream_format": "audio"}, PCM_TYPES),
    "sglang-omni": Target("POST", "/v1/audio/speech", REQUEST_HEADERS, {**_STREAMED, "response_format": "pcm"},
                          PCM_TYPES, rate_header="x-sample-rate"),
    "voxserve": Target("POST", "/v1/audio/speech", REQUEST_HEADERS, {**_STREAMED, "response_format": "pcm"},
                       PCM_TYPES),
    "nari": Target("POST", "/v1/audio/speech", REQUEST_HEADERS, {**_STREAMED, "response_format": "pcm"}, PCM_TYPES),
    "mstar": Target("POST", "/v1/audio/speech", REQUEST_HEADERS, {**_STREAMED, "response_format": "wav"}, WAV_TYPES,
                    wav=True),
}


def body_for(target: Target, text: str, model: str, voice: str, language: str) -> dict[str, Any]:
    return {"model": model, "input": text, "voice": voice, "language": language, **target.body}


@dataclass
class Answer:
    status: int
    content_type: str
    headers: dict[str, str]
    raw: bytes
    pcm: np.ndarray | None = None  # int16, once the body was read as tts-bench reads it

    def describe(self) -> str:
        return f"HTTP {self.status} {self.content_type}: {self.raw[:300]!r}"


def wav_payload(data: bytes) -> bytes:
    """The PCM of a (possibly streamed) RIFF/WAVE body, checked as tts-bench's WAV reader checks it: PCM16 mono at
    RATE, a data chunk whose size is the rest (0xFFFFFFFF: open-ended) or exactly what follows."""
    assert data[:4] == b"RIFF" and data[8:12] == b"WAVE", data[:12]
    at = 12
    fmt_seen = False
    while at + 8 <= len(data):
        chunk, size = struct.unpack_from("<4sI", data, at)
        at += 8
        if chunk == b"data":
            assert fmt_seen, "no fmt chunk before data"
            payload = data[at:] if size == 0xFFFFFFFF else data[at:at + size]
            assert size == 0xFFFFFFFF or len(payload) == size, (size, len(payload))
            return payload
        if chunk == b"fmt ":
            codec, channels, rate, byte_rate, align, bits = struct.unpack_from("<HHIIHH", data, at)
            assert (codec, channels, rate, bits, align, byte_rate) == (1, 1, RATE, 16, 2, RATE * 2)
            fmt_seen = True
        at += size + size % 2
    raise AssertionError("no data chunk")


async def preflight(base_url: str) -> int:
    """targets.py `preflight_target`: before any load, `GET /health` must answer 2xx (its status)."""
    async with aiohttp.ClientSession() as http, http.get(base_url + "/health") as response:
        await response.read()
        return response.status


async def post_like_ttsbench(base_url: str, target: Target, body: dict[str, Any], timeout_s: float = 120) -> Answer:
    """One request as tts-bench sends it; the body read as it reads it (or the error answer, unread)."""
    async with aiohttp.ClientSession(headers=SESSION_HEADERS, timeout=aiohttp.ClientTimeout(total=timeout_s)) as http, \
            http.request(target.method, base_url + target.path, json=body, headers=target.headers) as response:
        raw = await response.read()
        headers = {k.lower(): v for k, v in response.headers.items()}
    answer = Answer(response.status, headers.get("content-type", "").split(";", 1)[0].strip().lower(), headers, raw)
    if 200 <= answer.status < 300 and answer.content_type in target.content_types:
        payload = wav_payload(raw) if target.wav else raw
        assert len(payload) % 2 == 0, "a partial PCM16 sample"
        answer.pcm = np.frombuffer(payload, "<i2")
    return answer


def word_chunks(text: str) -> list[str]:
    """targets.py `input_chunks`: one chunk per word, each with the whitespace after it; joined, the text."""
    starts = [m.start() for m in re.finditer(r"\S+", text)][1:]
    bounds = [0, *starts, len(text)]
    return [text[a:b] for a, b in pairwise(bounds) if a < b]


@dataclass
class WsResult:
    session_created: dict[str, Any]
    configured: dict[str, Any]
    events: list[dict[str, Any]]  # everything after request.configured, in order (binary frames as {"binary": n})
    pcm: np.ndarray
    close_code: int | None


class WsFailure(AssertionError):
    """What tts-bench would record as the request's failure (its `_ObservedFailure` message)."""


async def speak_over_ws(base_url: str, text: str, start: dict[str, Any], timeout_s: float = 120) -> WsResult:
    """tts-bench's WebSocket mode (runtime.py `execute_websocket`): connect with the `nari.speech.v1` subprotocol,
    expect `session.created`, send `request.start`, expect `request.configured`; then one `input_text.append` per
    word every 10 ms, each acknowledged (`input_text.ack`) before the next; `input_text.end`, acknowledged; audio is
    binary PCM16 after `response.started` until `response.done` (request_id, stop_reason "stop", audio_chunks equal
    to the binary frames), and the server then closes with 1000. Any other event fails it."""
    url = base_url.replace("http://", "ws://", 1) + "/v1/audio/speech/ws"
    loop = asyncio.get_running_loop()
    async with aiohttp.ClientSession(headers=SESSION_HEADERS) as http, asyncio.timeout(timeout_s), \
            http.ws_connect(url, protocols=(WS_PROTOCOL,), compress=0) as ws:
        if ws.protocol != WS_PROTOCOL:
            raise WsFailure(f"server did not negotiate {WS_PROTOCOL}")
        created = await _first_event(ws, "session.created")
        if created.get("protocol") != WS_PROTOCOL or created.get("audio") != WS_AUDIO:
            raise WsFailure(f"session.created: {created}")
        await ws.send_json({"type": "request.start", **start})
        configured = await _first_event(ws, "request.configured")
        acks: asyncio.Queue[tuple[str, int]] = asyncio.Queue()
        events: list[dict[str, Any]] = []
        pcm = bytearray()
        receiver = loop.create_task(_receive_output(ws, acks, events, pcm))
        try:
            chunks = word_chunks(text)
            first_at = None
            for sequence, chunk in enumerate(chunks):
                if first_at is None:
                    first_at = loop.time()
                else:  # absolute cadence from the first chunk, as tts-bench paces it
                    await asyncio.sleep(max(0.0, first_at + sequence * WS_CHUNK_INTERVAL_S - loop.time()))
                await ws.send_json({"type": "input_text.append", "sequence": sequence, "text": chunk})
                await _ack(acks, receiver, "input_text.append", sequence)
            await ws.send_json({"type": "input_text.end", "sequence": len(chunks)})
            await _ack(acks, receiver, "input_text.end", len(chunks))
            await receiver
        finally:
            receiver.cancel()
        if len(pcm) % 2 or not pcm:
            raise WsFailure(f"{len(pcm)} bytes of PCM16")
        return WsResult(created, configured, events, np.frombuffer(bytes(pcm), "<i2"), ws.close_code)


def _event(message: aiohttp.WSMessage) -> dict[str, Any]:
    if message.type is not aiohttp.WSMsgType.TEXT:
        raise WsFailure(f"expected a JSON event, received {message.type.name}")
    value = json.loads(message.data)
    if not isinstance(value, dict):
        raise WsFailure("an event must be a JSON object")
    if value.get("type") == "error":
        raise WsFailure(str(value.get("error") or value))
    return value


async def _first_event(ws: aiohttp.ClientWebSocketResponse, expected: str) -> dict[str, Any]:
    message = await ws.receive()
    if message.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.CLOSING,
                        aiohttp.WSMsgType.ERROR):
        raise WsFailure(f"closed before {expected}")
    value = _event(message)
    if value.get("type") != expected:
        raise WsFailure(f"expected {expected}, received {value.get('type')!r}")
    return value


async def _ack(acks: asyncio.Queue[tuple[str, int]], receiver: asyncio.Task[None], event: str, sequence: int) -> None:
    getting = asyncio.ensure_future(acks.get())
    await asyncio.wait({getting, receiver}, return_when=asyncio.FIRST_COMPLETED)
    if not getting.done():
        getting.cancel()
        if acks.empty():
            await receiver  # its failure, if it failed
            raise WsFailure(f"the socket ended before the {event} ack {sequence}")
        got = acks.get_nowait()
    else:
        got = getting.result()
    if got != (event, sequence):
        raise WsFailure(f"expected the {event} ack {sequence}, received {got}")


async def _receive_output(ws: aiohttp.ClientWebSocketResponse, acks: asyncio.Queue[tuple[str, int]],
                          events: list[dict[str, Any]], pcm: bytearray) -> None:
    started: dict[str, Any] | None = None
    done = False
    binary = 0
    while True:
        message = await ws.receive()
        if message.type is aiohttp.WSMsgType.BINARY:
            if started is None:
                raise WsFailure("audio arrived before response.started")
            binary += 1
            pcm += message.data
            events.append({"binary": len(message.data)})
            continue
        if message.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.CLOSING):
            if not done:
                raise WsFailure("the socket closed before response.done")
            if ws.close_code != 1000:
                raise WsFailure(f"closed with code {ws.close_code}")
            return
        if message.type is aiohttp.WSMsgType.ERROR:
            raise WsFailure(f"receive failed: {ws.exception()}")
        value = _event(message)
        events.append(value)
        kind = value.get("type")
        if kind == "input_text.ack":
            if not isinstance(value.get("event"), str) or not isinstance(value.get("sequence"), int):
                raise WsFailure(f"invalid ack {value}")
            acks.put_nowait((value["event"], value["sequence"]))
        elif kind == "response.started":
            if started is not None or not isinstance(value.get("request_id"), str) or not value["request_id"]:
                raise WsFailure(f"response.started: {value}")
            if value.get("audio") != WS_AUDIO:
                raise WsFailure(f"response.started audio: {value.get('audio')}")
            started = value
        elif kind == "response.done":
            if started is None or value.get("request_id") != started["request_id"]:
                raise WsFailure(f"response.done: {value}")
            if value.get("stop_reason") != "stop":
                raise WsFailure(f"unexpected stop reason {value.get('stop_reason')!r}")
            if value.get("audio_chunks") != binary:
                raise WsFailure(f"response.done counts {value.get('audio_chunks')} audio chunks, {binary} came")
            done = True
        else:
            raise WsFailure(f"unexpected WebSocket event {kind!r}")

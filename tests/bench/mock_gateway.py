"""A stand-in gateway for the harness's own tests: the subset of docs/protocol.md that `voxgate bench` uses.

After `first_ms`, the first `burst_ms` of audio come at once (a cushion, so that scheduling hiccups of a loaded CI
machine are not pauses), then audio comes `speed` times faster than real time. A text containing "STALL" stops for
`stall_ms` after the burst, so the pause rule sees a known pause (stall_ms - burst_ms) end to end.
A session with `timestamps: "word"` gets word *i* of a text at i x 370 ms (as the fake engine's), each word's event
right before the frame holding its first sample, or right after it when session.start says `timestamps_hold: false`
(echoed in session.started, or answered with `answer_hold` where set).
"""

from __future__ import annotations

import asyncio
import json
import struct
import threading
import time
from dataclasses import dataclass, field

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect
from voxgate.gateway.bench.gateway_process import free_port

RATE = 24_000
WORD_SAMPLES = RATE * 370 // 1000
HEADER = struct.Struct("<BBHIIHHQ")


@dataclass
class MockConfig:
    speed: float = 20.0
    first_ms: float = 5.0
    stall_ms: float = 400.0
    burst_ms: int = 200
    requests: list[dict] = field(default_factory=list)  # what the clients sent, for assertions
    session_starts: list[dict] = field(default_factory=list)  # every session.start, as sent
    frames: int = 0  # exposed as a step histogram on /metrics
    answer_hold: bool | None = None  # session.started's `timestamps_hold` whatever was asked (None: the echo)


def _length_samples(text: str, max_audio_ms: int | None) -> int:
    n = round(len(text.split()) * 0.37 * RATE)
    return min(n, max_audio_ms * RATE // 1000) if max_audio_ms else n


async def _frames(cfg: MockConfig, text: str, max_audio_ms: int | None, frame_ms: int):
    total = _length_samples(text, max_audio_ms)
    per = RATE * frame_ms // 1000
    await asyncio.sleep(cfg.first_ms / 1000)
    sent = 0
    burst = RATE * cfg.burst_ms // 1000
    while sent < total:
        n = min(per, total - sent)
        cfg.frames += 1
        yield sent, n
        sent += n
        if sent == burst and "STALL" in text:
            await asyncio.sleep(cfg.stall_ms / 1000)
        if sent >= burst:
            await asyncio.sleep(n / RATE / cfg.speed)


def build_app(cfg: MockConfig) -> Starlette:
    async def ws_endpoint(ws: WebSocket) -> None:
        await ws.accept(subprotocol="voxgate.v1")
        start = json.loads(await ws.receive_text())
        cfg.session_starts.append(start)
        frame_ms = start.get("audio", {}).get("frame_ms", 20)
        timed = start.get("timestamps") == "word"
        hold = start.get("timestamps_hold", True)
        await ws.send_json(
            {
                "type": "session.started",
                "session_id": "s1",
                "protocol": "voxgate.v1",
                "engine": "mock",
                "audio": {"codec": "pcm_s16le", "sample_rate": RATE, "frame_ms": frame_ms, "channels": 1},
                "pacing": {"mode": start.get("pacing", {}).get("mode")},
                "limits": {},
                "voices": ["m"],
                "defaults": {"voice": "m", "language": "en"},
                "timestamps": "word" if timed else "none",
                **({"timestamps_hold": start["timestamps_hold"]} if "timestamps_hold" in start else {}),
                **({"timestamps_hold": cfg.answer_hold} if cfg.answer_hold is not None else {}),
            }
        )
        contexts: dict[str, dict] = {}
        seq, ctx_num, pts = 0, 0, 0
        try:
            while True:
                msg = json.loads(await ws.receive_text())
                cid = msg.get("context_id")
                if msg["type"] == "context.open":
                    ctx_num += 1
                    contexts[cid] = {"ctx": ctx_num, "text": "", "max_audio_ms": msg.get("max_audio_ms")}
                elif msg["type"] == "text.append":
                    contexts[cid]["text"] += msg["text"]
                elif msg["type"] == "context.end":
                    c = contexts.pop(cid)
                    cfg.requests.append({"transport": "ws", "text": c["text"], "max_audio_ms": c["max_audio_ms"]})
                    t0 = time.perf_counter()
                    first = None
                    await ws.send_json(
                        {"type": "context.started", "context_id": cid, "ctx": c["ctx"], "track": 0, "start_pts": pts}
                    )
                    words = c["text"].split() if timed else []
                    async for offset, n in _frames(cfg, c["text"], c["max_audio_ms"], frame_ms):
                        flags = 1 if offset == 0 else 0
                        # the words whose first sample is in this frame
                        starting = [(i, w) for i, w in enumerate(words) if offset <= i * WORD_SAMPLES < offset + n]
                        event = {"type": "timestamps", "context_id": cid, "ctx": c["ctx"], "words": [
                            {"word": w, "start_ms": i * 370.0, "end_ms": (i + 1) * 370.0} for i, w in starting]}
                        if starting and hold:
                            await ws.send_json(event)
                        await ws.send_bytes(HEADER.pack(1, 0, flags, c["ctx"], seq, 0, n, pts) + bytes(2 * n))
                        if starting and not hold:
                            await ws.send_json(event)
                        first = first if first is not None else (time.perf_counter() - t0) * 1e3
                        seq, pts = seq + 1, pts + n
                    await ws.send_json(
                        {
                            "type": "context.done",
                            "context_id": cid,
                            "ctx": c["ctx"],
                            "end_pts": pts,
                            "usage": {},
                            "timing": {"first_audio_ms": first},
                            "stalls": {"events": 0, "total_ms": 0, "max_ms": 0, "by_cause": {}},
                        }
                    )
        except WebSocketDisconnect:
            return

    async def speech(request: Request) -> StreamingResponse:
        body = await request.json()
        cfg.requests.append(
            {
                "transport": "http",
                "text": body["input"],
                "max_audio_ms": body.get("max_audio_ms"),
                "voice": body.get("voice"),
            }
        )

        async def gen():
            async for _, n in _frames(cfg, body["input"], body.get("max_audio_ms"), 20):
                yield bytes(2 * n)

        return StreamingResponse(gen(), media_type="audio/pcm")

    async def health(_: Request) -> JSONResponse:
        return JSONResponse({"status": "ok", "engine": "mock", "sessions": 0})

    async def voices(_: Request) -> JSONResponse:
        return JSONResponse({"voices": [{"id": "m", "name": "M"}], "default": "m"})

    async def metrics(_: Request) -> PlainTextResponse:
        n = cfg.frames
        text = (
            "# TYPE voxgate_engine_step_seconds histogram\n"
            f'voxgate_engine_step_seconds_bucket{{part="talker",le="0.01"}} {n}\n'
            f'voxgate_engine_step_seconds_bucket{{part="talker",le="+Inf"}} {n}\n'
            f'voxgate_engine_step_seconds_count{{part="talker"}} {n}\n'
            f'voxgate_engine_step_seconds_sum{{part="talker"}} {n * 0.005}\n'
            "# TYPE voxgate_sessions gauge\nvoxgate_sessions 1\n"
        )
        return PlainTextResponse(text)

    return Starlette(
        routes=[
            WebSocketRoute("/v1/tts/ws", ws_endpoint),
            Route("/v1/audio/speech", speech, methods=["POST"]),
            Route("/health", health),
            Route("/v1/voices", voices),
            Route("/metrics", metrics),
        ]
    )


class MockGateway:
    """Runs the mock app with uvicorn in a thread: `with MockGateway() as gw: gw.base_url`."""

    def __init__(self, cfg: MockConfig | None = None) -> None:
        self.cfg = cfg or MockConfig()
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(
            build_app(self.cfg), host="127.0.0.1", port=self.port, log_level="warning", ws="websockets-sansio"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> MockGateway:
        self.thread.start()
        while not self.server.started:
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)

"""No reference cycle on the Qwen3-TTS request path (tests/reliability/test_gc_cycles.py for the gateway's own): a
WebSocket context spoken, one cancelled, and an HTTP speech stream through the engine loop (EngineLoop, EngineCore,
the runner on a tiny checkpoint on the CPU) leave nothing that only Python's garbage collector could free."""

from __future__ import annotations

import collections
import json
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from gc_support import connections_closed, server_garbage, wait_json
from support import running_gateway
from voxgate.engine.qwen3tts.engine import create_engine
from voxgate.gateway.config import GatewayConfig
from voxgate.gateway.protocol import PROTOCOL
from websockets.sync.client import connect

SMALL = dict(device="cpu", dtype="fp32", greedy="true", row_buckets="1,2", prefill_buckets="32", max_slots="3",
             max_positions="200", max_rows="2", chunk_frames="2,4", max_frames="12")


@pytest.mark.slow
def test_qwen3tts_streams_leave_no_cycles(tiny_ckpt: Callable[[str], Path]) -> None:
    engine = create_engine(model=str(tiny_ckpt("cv06")), **SMALL)
    with running_gateway(engine, GatewayConfig(first_audio_slo_ms=600_000)) as server:
        def streams() -> None:
            with connect(server.ws_url, subprotocols=[PROTOCOL], max_size=None) as ws:
                ws.send(json.dumps({"type": "session.start", "pacing": {"mode": "asap"},
                                    "defaults": {"voice": "ryan"}}))
                wait_json(ws, "session.started")
                ws.send(json.dumps({"type": "text.append", "context_id": "a", "text": "Hello there."}))
                ws.send(json.dumps({"type": "context.end", "context_id": "a"}))
                assert wait_json(ws, "context.done", timeout=60)["context_id"] == "a"
                ws.send(json.dumps({"type": "text.append", "context_id": "b", "text": "A turn cut short."}))
                ws.send(json.dumps({"type": "context.cancel", "context_id": "b"}))
                assert wait_json(ws, "context.cancelled", timeout=60)["context_id"] == "b"
            with httpx.stream("POST", server.http_url + "/v1/audio/speech", timeout=60,
                              json={"input": "Hi.", "voice": "ryan", "response_format": "pcm"}) as r:
                assert r.status_code == 200 and len(r.read()) > 0

        assert server_garbage(streams, connections_closed(server)) == collections.Counter()

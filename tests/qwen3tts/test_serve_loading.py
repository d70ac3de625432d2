"""`voxgate serve` listens while the engine loads (issue 17): /health answers 503 `starting` and new sessions are
refused with `not_ready` (close 1013) until the engine is warm, then 200 and sessions are served."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import websockets
from support import VOXGATE, free_port, spawn


@pytest.mark.slow
async def test_a_loading_backend_answers_503_and_refuses_sessions(tiny_ckpt: Callable[[str], Path],
                                                                  tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    # Admission by queue, as support.cpu_loop_config gives the in-process tests: on a loaded 2-core machine the
    # deadline forecast of a tiny CPU model can rightly refuse the first session (engine_full), and this test is
    # about loading (admission has its own tests)
    config = tmp_path / "gateway.toml"
    config.write_text('admission = "queue"\n')
    args = [VOXGATE, "serve", "--config", str(config), "--engine", "qwen3tts", "--port", str(port), "--engine-option",
            f"model={tiny_ckpt('cv17')}", "--engine-option", "device=cpu", "--engine-option", "row_buckets=1,2",
            "--engine-option", "prefill_buckets=64"]
    # Not serve_process: the test must see /health before it answers 200.
    with spawn(args, tmp_path / "serve.log", grace_s=30) as served:
        seen: list[int] = []
        refused = None
        deadline = time.monotonic() + 120
        while not seen or seen[-1] != 200:
            assert served.proc.poll() is None and time.monotonic() < deadline, served.log_text()
            try:
                health = httpx.get(url + "/health", timeout=2)
            except httpx.TransportError:
                time.sleep(0.02)
                continue
            seen.append(health.status_code)
            if health.status_code == 503 and refused is None:
                assert health.json()["status"] == "starting"
                async with websockets.connect(f"ws://127.0.0.1:{port}/v1/tts/ws",
                                              subprotocols=["voxgate.v1"]) as ws:
                    refused = json.loads(await ws.recv())
                    await ws.wait_closed()
                    assert ws.close_code == 1013
        assert seen[0] == 503 and refused is not None and refused["code"] == "not_ready", (seen, refused)
        async with websockets.connect(f"ws://127.0.0.1:{port}/v1/tts/ws", subprotocols=["voxgate.v1"]) as ws:
            await ws.send(json.dumps({"type": "session.start"}))
            assert json.loads(await ws.recv())["type"] == "session.started"

"""`voxgate bench soak` against a real gateway: every frame checked, and an asap session that received minutes of
audio ends with its last context (it does not sit idle waiting for a simulated playback, past idle_timeout)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from voxgate.gateway.cli.main import main as voxgate_main


@pytest.mark.slow
def test_an_asap_soak_ends_when_its_sessions_stop_speaking(gateway, fake_engine, tmp_path: Path):
    server = gateway(engine=fake_engine(device_rtf=1000, shared_device=False, chunk_ms="320,640,1280"))
    out = tmp_path / "soak.json"
    t0 = time.monotonic()
    rc = voxgate_main(["bench", "soak", "--url", server.http_url, "--sessions", "4", "--pacing", "asap",
                       "--frame-ms", "20", "--duration", "2", "--ramp", "0", "--processes", "1", "--out", str(out)])
    elapsed = time.monotonic() - t0
    summary = json.loads(out.read_text())
    assert rc == 0 and summary["lost"] == summary["garbled"] == summary["errors"] == summary["server_errors"] == 0
    assert summary["frames"] > 0 and elapsed < 20, elapsed  # minutes of audio arrived; nobody waits to "play" it

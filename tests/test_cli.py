"""`voxgate serve` as a real process, spoken to by `voxgate say` and by curl, as a new user would."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import wave

import pytest
from support import VOXGATE, free_port, serve_process


@pytest.fixture
def served(tmp_path):
    with serve_process(tmp_path / "serve.log", "--log-level", "warning") as server:
        yield server.port
        server.proc.terminate()
        # uvicorn shuts down gracefully, then re-raises the captured SIGTERM (exit -15).
        assert server.proc.wait(timeout=10) in (0, -15), server.log_text()


@pytest.mark.slow
def test_serve_say_and_curl(served, tmp_path):
    out = tmp_path / "out.wav"
    said = subprocess.run([VOXGATE, "say", "Hello from voxgate. The gateway speaks.", "-o", str(out), "--url",
                           f"ws://127.0.0.1:{served}/v1/tts/ws"], capture_output=True, text=True, timeout=60)
    assert said.returncode == 0, said.stderr
    assert "first audio:" in said.stdout, said.stdout
    # No pause over 10 ms, or only pauses the server attributes to this process reading late (`network`,
    # `client`): on a loaded machine `say` shares the cores with the server and the rest of the suite.
    stalls = re.search(r"stalls: \d+ \((\d+) over 10 ms, .*; server saw (\d+)(?: \((.*)\))?$", said.stdout, re.M)
    assert stalls is not None, said.stdout
    causes = dict(part.split(" ") for part in stalls[3].split(", ")) if stalls[3] else {}
    assert int(stalls[1]) == 0 or (causes and set(causes) <= {"network", "client"}), said.stdout
    with wave.open(str(out)) as w:
        assert w.getframerate() == 24000 and w.getnframes() > 24000
    curl = shutil.which("curl")
    if curl is None:
        pytest.skip("curl is not installed")
    pcm = tmp_path / "out.pcm"
    done = subprocess.run([curl, "-sS", "-f", "-X", "POST", f"http://127.0.0.1:{served}/v1/audio/speech", "-H",
                           "Content-Type: application/json", "-d",
                           '{"model":"voxgate","input":"Hello from curl.","voice":"en-us","response_format":"pcm"}',
                           "-o", str(pcm)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert pcm.stat().st_size > 24000  # more than half a second of PCM16


@pytest.mark.slow
def test_serve_refuses_a_bad_config_clearly(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("engin = 'espeak'\n")
    done = subprocess.run([VOXGATE, "serve", "--config", str(bad)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "unknown key(s)" in done.stderr and "engin" in done.stderr


@pytest.mark.slow
def test_say_reports_an_unreachable_server():
    done = subprocess.run([VOXGATE, "say", "hi", "--url", f"ws://127.0.0.1:{free_port()}/v1/tts/ws"],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 1 and "cannot reach" in done.stderr


def test_generic_package_names_are_not_shadowed(tmp_path):
    # `kernels` is a Hugging Face package that transformers probes for; ours must live under `voxgate.` only.
    code = ("import importlib.util as u, sys; "
            "assert all(u.find_spec(n) is None for n in ('kernels', 'engine', 'gateway')), sys.path; "
            "import voxgate.kernels, voxgate.engine, voxgate.gateway")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    assert subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env).returncode == 0
    import importlib.util

    assert importlib.util.find_spec("kernels") is None, "the test run itself must not put the repo root on sys.path"


def test_say_counts_the_stalls_the_server_reported_after_the_context_was_done():
    """A listener that runs dry near the end reports it once the server has sent everything: `say` adds those
    `stall` messages to what context.done counted (the ones before it are in that count already)."""
    from voxgate.gateway.cli.say import _server_stalls

    done = {"type": "context.done", "context_id": "say", "stalls": {"events": 1, "by_cause": {"generation": 1}}}
    messages = [{"type": "stall", "context_id": "say", "cause": "generation", "events": 1}, done,
                {"type": "stall", "context_id": "other", "cause": "network", "events": 1},
                {"type": "stall", "context_id": "say", "cause": "client", "events": 2}]
    assert _server_stalls(done, messages) == (3, {"generation": 1, "client": 2})
    assert _server_stalls(done, messages[:2]) == (1, {"generation": 1})

"""SIGTERM drains and always ends (issue 13, point 3): a real `voxgate serve` with live contexts, a client that
does not read and a slow HTTP reader ends within the grace plus 2 s; every context ends with a documented message;
/health turns 503 at once; new sessions are refused."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time

import httpx
import pytest
import websockets
from raw import RawWebSocket, SlowHttpReader
from support import next_json, until
from voxgate.client.protocol_client import VoxgateClient
from voxgate.gateway.protocol import PROTOCOL

GRACE_S = 2.0
LONG = " ".join(["word"] * 60)  # 22 s of fake-engine audio: cannot finish within the grace
# More than the kernel buffers between the server and a client that does not read (up to 4 MB each way here):
# 300 words are 111 s of audio, 10.7 MB of PCM at 48 kHz, 5.3 MB at 24 kHz.
HUGE = " ".join(["word"] * 300)


@pytest.mark.slow
async def test_sigterm_drains_then_ends_within_the_grace_plus_2_s(serve):
    server = serve(f"shutdown_grace_s = {GRACE_S}\n", "--log-level", "info", "--engine-option", "device_rtf=1000")
    host, port = "127.0.0.1", server.port
    # A client that never reads, mid-way through a long asap context: the server cannot write to it.
    stuck = RawWebSocket(host, port, rcvbuf=4096)
    stuck.send_json({"type": "session.start", "pacing": {"mode": "asap"}, "audio": {"sample_rate": 48000}})
    stuck.send_json({"type": "text.append", "context_id": "stuck", "text": HUGE})
    stuck.send_json({"type": "context.end", "context_id": "stuck"})
    # An HTTP client that reads the first bytes of a long stream, then stops.
    slow = SlowHttpReader(host, port, {"input": HUGE, "voice": "tone-a"})
    assert slow.status == 200
    async with VoxgateClient(server.ws_url, pacing="realtime", voice="tone-a") as client:
        # Two live contexts on two tracks: one ends within the grace (1.1 s of audio), one cannot (22 s).
        for cid, track, text in (("short", 0, "one two three"), ("long", 1, LONG)):
            await client.send({"type": "context.open", "context_id": cid, "track": track})
            await client.send({"type": "text.append", "context_id": cid, "text": text})
            await client.send({"type": "context.end", "context_id": cid})
        await until(lambda: client.context("long").frames and client.context("short").frames, 10, "audio of both")
        signalled = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)

        async with httpx.AsyncClient(base_url=server.http_url) as http:
            health = await http.get("/health")
        assert health.status_code == 503 and health.json()["status"] == "draining"
        assert time.monotonic() - signalled < GRACE_S  # during the grace, not after it (behaviour, not speed)
        late = await websockets.connect(server.ws_url, subprotocols=[PROTOCOL])  # new sessions are refused
        refused = await next_json(late)
        assert refused["code"] == "shutting_down" and refused["fatal"]
        await late.wait_closed()
        assert late.close_code == 1001

        await asyncio.wait_for(client.closed.wait(), GRACE_S + 2)
    kinds = [m["type"] for m in client.messages]
    draining = next(m for m in client.messages if m["type"] == "session.draining")
    assert 0 < draining["grace_ms"] <= GRACE_S * 1000
    assert client.context("short").event("context.done") is not None  # finished within the grace
    cancelled = client.context("long").event("context.cancelled")  # cut at the end of the grace
    assert cancelled is not None and client.context("long").event("context.done") is None
    assert kinds[-1] == "error" and client.messages[-1]["code"] == "shutting_down"
    assert kinds.index("session.draining") < kinds.index("context.cancelled") < len(kinds) - 1
    assert client.close_code == 1001
    # Neither the client that does not read nor the slow reader keeps the process alive.
    returncode = await asyncio.to_thread(server.proc.wait, GRACE_S + 2 - (time.monotonic() - signalled))
    ended = time.monotonic() - signalled
    assert ended < GRACE_S + 2, ended
    assert "did not close in time" in server.log_text()  # the two were stuck indeed, and were cut
    if returncode != -signal.SIGTERM:
        print(server.log_text())  # whole (an assertion's message is cut): a crash's stacks, from faulthandler
    assert returncode == -signal.SIGTERM, returncode  # drained, not the watchdog's exit 70
    assert "Traceback" not in server.log_text(), server.log_text()
    stuck.close()
    slow.close()


@pytest.mark.slow
async def test_sigterm_without_live_sessions_ends_at_once(serve):
    server = serve(f"shutdown_grace_s = {GRACE_S}\n")
    async with VoxgateClient(server.ws_url, pacing="asap", voice="tone-a") as client:  # an idle session
        signalled = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(client.closed.wait(), 2)
        assert client.close_code == 1001 and client.messages[-1]["code"] == "shutting_down"
    await asyncio.to_thread(server.proc.wait, 5)
    assert time.monotonic() - signalled < GRACE_S  # it did not wait out the grace for sessions it does not have


STUCK_SERVER = """
import socket, sys, time
from voxgate.engine.fake import FakeEngine
from voxgate.gateway.app import create_app
from voxgate.gateway.config import GatewayConfig
from voxgate.gateway.transport.uvicorn_server import draining_server, uvicorn_config

class StuckOnStop(FakeEngine):
    async def stop(self):
        time.sleep(60)  # blocks the event loop itself: only the watchdog can end the process now

app = create_app(StuckOnStop(), GatewayConfig(shutdown_grace_s=float(sys.argv[1])))
sock = socket.socket()
sock.bind(("127.0.0.1", 0))
print(sock.getsockname()[1], flush=True)
draining_server(app, uvicorn_config(app, "127.0.0.1", 0, log_level="warning")).run(sockets=[sock])
"""


@pytest.mark.slow
def test_the_hard_deadline_ends_a_process_that_a_stuck_engine_holds():
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", STUCK_SERVER, "0.5"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        port = int(proc.stdout.readline())
        deadline = time.monotonic() + 20
        while True:
            with contextlib.suppress(httpx.TransportError):  # bound before it listens
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200:
                    break
            assert time.monotonic() < deadline
            time.sleep(0.05)
        signalled = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=5) == 70  # the watchdog's exit status
        assert time.monotonic() - signalled < 0.5 + 2
        assert "exiting now" in proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.slow
async def test_a_native_crash_prints_every_threads_stack(serve):
    """`voxgate serve` runs with faulthandler on: a fatal signal (here SIGSEGV, as a crash in a codec or a CUDA
    library raises it) prints the Python stack of every thread on stderr before the process dies (without it: no
stack, the test fails)."""
    server = serve()
    async with httpx.AsyncClient(base_url=server.http_url) as http:
        assert (await http.get("/health")).status_code == 200
    server.proc.send_signal(signal.SIGSEGV)
    returncode = await asyncio.to_thread(server.proc.wait, 10)
    assert returncode == -signal.SIGSEGV
    log = server.log_text()
    assert "Fatal Python error: Segmentation fault" in log, log
    assert "Current thread 0x" in log and "gateway/cli/serve.py" in log, log  # where the main thread was

"""`voxgate serve --gpus 0,1` on the CPU (issue 17): the supervisor starts one real `voxgate serve` per device on
consecutive ports, restarts a child that crashes while the other keeps speaking, and SIGTERM drains every child's
sessions (1001 `shutting_down`) before it exits; no child outlives it. A child that dies before it is ever ready,
3 starts in a row, makes the supervisor give up with one line and exit 1 (issue 23.4)."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from processes import free_port_pair
from support import VOXGATE, bystander, serve_process, spawn, until
from voxgate.client.protocol_client import VoxgateClient
from voxgate.gateway.cli.supervisor import Supervisor

pytestmark = pytest.mark.slow
GRACE_S = 3.0


def child_pids(log: str, device: str) -> list[int]:
    return [int(pid) for pid in re.findall(rf"started {device} on port \d+ \(pid (\d+)\)", log)]


def url(port: int) -> str:
    return f"http://127.0.0.1:{port}"


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_gpus_supervises_one_process_per_device(tmp_path: Path):
    config = tmp_path / "gateway.toml"
    config.write_text(f"shutdown_grace_s = {GRACE_S}\n")
    port, agent = free_port_pair(), free_port_pair()
    with serve_process(tmp_path / "supervisor.log", "--gpus", "0,1", "--agent-port", str(agent), port=port,
                       engine="fake", config=config, stop="kill") as sup:  # (healthy: cuda:0's child on `port`)
        for k in (0, 1):
            sup.wait_healthy(url(port + k))
            load = httpx.get(url(port + k) + "/health/load").json()
            assert load["device"] == f"cuda:{k}" and load["accepting"], load
            with socket.create_connection(("127.0.0.1", agent + k), timeout=5) as check:  # its HAProxy agent
                assert check.recv(100).startswith(b"up ready ")
            assert f'voxgate_sessions_open{{device="cuda:{k}"}} 0.0' in httpx.get(url(port + k) + "/metrics").text

        # A crash (SIGKILL) of cuda:1: restarted on its port, while cuda:0's session never pauses.
        (crashed,) = child_pids(sup.log_text(), "cuda:1")
        async with bystander(f"ws://127.0.0.1:{port}/v1/tts/ws"):
            os.kill(crashed, signal.SIGKILL)
            deadline = time.monotonic() + 20
            while len(child_pids(sup.log_text(), "cuda:1")) < 2:
                assert time.monotonic() < deadline, sup.log_text()
                await asyncio.sleep(0.05)
        await asyncio.to_thread(sup.wait_healthy, url(port + 1))
        assert f"cuda:1 (pid {crashed}, port {port + 1}) exited with status -9" in sup.log_text()
        pids = [child_pids(sup.log_text(), "cuda:0")[-1], child_pids(sup.log_text(), "cuda:1")[-1]]

        # SIGTERM: each child drains its live session (the context finishes, then 1001), then all exit.
        clients = [VoxgateClient(f"ws://127.0.0.1:{port + k}/v1/tts/ws", pacing="realtime", voice="tone-a")
                   for k in (0, 1)]
        for client in clients:
            await client.__aenter__()
        speaking = [asyncio.get_running_loop().create_task(c.speak("c", "one two three")) for c in clients]
        await until(lambda: all(c.context("c").frames for c in clients), 10, "audio on both")  # live contexts
        signalled = time.monotonic()
        sup.proc.send_signal(signal.SIGTERM)
        for client, task in zip(clients, speaking, strict=True):
            result = await asyncio.wait_for(task, GRACE_S + 2)
            assert result.event("context.done") is not None
            await asyncio.wait_for(client.closed.wait(), GRACE_S + 2)
            assert "session.draining" in [m["type"] for m in client.messages]
            assert client.close_code == 1001 and client.messages[-1]["code"] == "shutting_down"
            await client.__aexit__()
        assert await asyncio.to_thread(sup.proc.wait, GRACE_S + 5) == 0, sup.log_text()
        assert time.monotonic() - signalled < GRACE_S + 2
        assert not [pid for pid in pids if alive(pid)]
        assert "Traceback" not in sup.log_text(), sup.log_text()


def test_gpus_refuses_device_and_port_zero(tmp_path: Path):
    for extra, message in ((["--device", "cuda:0"], "exclude each other"), (["--port", "0"], "consecutive ports")):
        done = subprocess.run([VOXGATE, "serve", "--gpus", "0,1", "--engine", "fake", *extra], capture_output=True,
                              text=True, timeout=30)
        assert done.returncode == 2 and message in done.stderr, done.stderr


def test_gpus_gives_up_on_a_child_that_never_becomes_ready(tmp_path: Path):
    """cuda:1's port is taken, so each of its starts exits (status 1) before it is ready, as on a machine without
    that GPU: after the third, one line, every child stopped, exit 1 (it restarted forever)."""
    config = tmp_path / "gateway.toml"
    config.write_text("shutdown_grace_s = 1.0\n")
    port = free_port_pair()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", port + 1))
        busy.listen()
        args = [VOXGATE, "serve", "--gpus", "0,1", "--engine", "fake", "--config", str(config), "--port", str(port)]
        with spawn(args, tmp_path / "supervisor.log", stop="kill") as sup:
            status = sup.proc.wait(timeout=90)
            log = sup.log_text()
    assert status == 1, log
    assert len(child_pids(log, "cuda:1")) == 3, log
    assert "before it was ready (1 of 3); restarting in 1 s" in log and "(2 of 3); restarting in 2 s" in log, log
    gave_up = [line for line in log.splitlines() if "giving up" in line]
    assert len(gave_up) == 1 and f"cuda:1 (port {port + 1}) exited before it was ready 3 times in a row " \
        "(last status 1); giving up: stopping every child" in gave_up[0], log
    assert "Traceback" not in log, log
    assert not [pid for pid in child_pids(log, "cuda:0") + child_pids(log, "cuda:1") if alive(pid)]


# A child that says it is ready, then crashes; its fourth start stops the supervisor (SIGTERM to its parent).
READY_THEN_CRASH = """
import os, pathlib, signal, sys
from voxgate.gateway.cli.supervisor import notify_ready
starts = pathlib.Path(sys.argv[1])
starts.write_text(starts.read_text() + "x" if starts.exists() else "x")
if len(starts.read_text()) == 4:
    os.kill(os.getppid(), signal.SIGTERM)
    sys.exit(0)
notify_ready()
sys.exit(1)
"""


def test_a_child_that_was_ready_is_restarted_however_often_it_crashes(tmp_path: Path):
    """Only starts that never reach ready count: with a limit of 1, a child that crashes after each ready is
    still restarted (3 crashes, then the fourth start stops the supervisor, which exits 0)."""
    starts = tmp_path / "starts"
    supervisor = Supervisor(lambda device, port: [sys.executable, "-c", READY_THEN_CRASH, str(starts)],
                            [("cuda:0", 1)], stop_after_s=10.0, max_failed_starts=1)
    assert supervisor.run() == 0
    assert starts.read_text() == "xxxx" and supervisor.children[0].restarts == 3

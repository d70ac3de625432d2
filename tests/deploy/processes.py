"""Real processes for the deployment tests: `voxgate serve` backends (espeak) and HAProxy running
deploy/haproxy/haproxy.cfg on free ports, each started through tests/support.py's `spawn` and killed at the end."""

from __future__ import annotations

import contextlib
import csv
import io
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from support import ServeProcess, free_port, serve_process, spawn

REPO = Path(__file__).resolve().parents[2]
HAPROXY_CFG = REPO / "deploy" / "haproxy" / "haproxy.cfg"


def free_port_pair() -> int:
    """A port P with P + 1 free too (the supervisor's children take consecutive ports)."""
    for _ in range(100):
        port = free_port()
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise RuntimeError("no two consecutive free ports")


def backend(log: Path, port: int, config: Path, agent_port: int | None = None
            ) -> contextlib.AbstractContextManager[ServeProcess]:
    """`voxgate serve` (espeak) on `port` (and its HAProxy agent on `agent_port`), yielded once healthy; killed at the
    end (a test's end drains nothing)."""
    agent = ("--agent-port", str(agent_port)) if agent_port else ()
    return serve_process(log, *agent, port=port, config=config, engine="espeak", stop="kill")


def haproxy_binary() -> str:
    """haproxy's path; skips the test without it, except under CI=true, where it must be installed."""
    found = shutil.which("haproxy") or next((p for p in ("/usr/sbin/haproxy", "/usr/local/sbin/haproxy")
                                             if os.access(p, os.X_OK)), None)
    if found is None:
        reason = "haproxy is not installed (Debian: apt-get install haproxy; README's test command does)"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return found


@dataclass
class Balancer:
    proc: subprocess.Popen
    port: int
    stats_port: int

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/v1/tts/ws"

    def server_status(self, column: str = "status") -> dict[str, str]:
        """Server name -> HAProxy's status of it (UP, DOWN, `UP 1/2`, ...), or another column of the stats page's
        CSV (`agent_status`: L7OK once the agent check answered)."""
        text = httpx.get(f"http://127.0.0.1:{self.stats_port}/;csv", timeout=2).text.lstrip("# ")
        return {row["svname"]: row[column] for row in csv.DictReader(io.StringIO(text))
                if row["pxname"] == "voxgate" and row["svname"] not in ("FRONTEND", "BACKEND")}

    def wait_status(self, server: str, status: str, timeout_s: float = 10.0) -> None:
        deadline = time.monotonic() + timeout_s
        while self.server_status().get(server) != status:
            assert time.monotonic() < deadline, f"{server} not {status} in {timeout_s:g} s: {self.server_status()}"
            time.sleep(0.05)


def haproxy_config(backend_ports: list[int], port: int, stats_port: int, agent_ports: list[int] | None = None) -> str:
    """deploy/haproxy/haproxy.cfg as shipped, on these ports and without the lines only root may run."""
    text = HAPROXY_CFG.read_text()
    for old, new in (("bind :8080", f"bind 127.0.0.1:{port}"), ("127.0.0.1:8404", f"127.0.0.1:{stats_port}"),
                     *((f"127.0.0.1:{8000 + k}", f"127.0.0.1:{p}") for k, p in enumerate(backend_ports)),
                     *((f"agent-port {8100 + k}", f"agent-port {p}") for k, p in enumerate(agent_ports or []))):
        assert old in text, f"{HAPROXY_CFG} no longer has {old!r}: update the test"
        text = text.replace(old, new)
    return "\n".join(line for line in text.splitlines() if "root-only" not in line) + "\n"


@contextlib.contextmanager
def haproxy(tmp_path: Path, backend_ports: list[int], agent_ports: list[int] | None = None) -> Iterator[Balancer]:
    binary = haproxy_binary()
    port, stats_port = free_port(), free_port()
    cfg = tmp_path / "haproxy.cfg"
    cfg.write_text(haproxy_config(backend_ports, port, stats_port, agent_ports))
    with spawn([binary, "-db", "-f", str(cfg)], tmp_path / "haproxy.log", stop="kill") as running:
        balancer = Balancer(running.proc, port, stats_port)
        running.wait_for(lambda: all(s == "UP" for s in balancer.server_status().values()), "every backend UP", 10)
        yield balancer

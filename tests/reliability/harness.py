"""The reliability suite's `voxgate serve` process (a real process: signals, exit codes, logs). The bystander session
is in tests/support.py, the raw socket clients in raw.py."""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
from support import VOXGATE, free_port


@dataclass
class ServeProcess:
    proc: subprocess.Popen
    port: int
    log: Path

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/v1/tts/ws"

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


@contextlib.contextmanager
def serve_process(tmp_path: Path, config: str = "", *args: str) -> Iterator[ServeProcess]:
    """`voxgate serve` (fake engine) as a real process with `config` as its TOML; killed at the end if still up."""
    port = free_port()
    (tmp_path / "serve.toml").write_text(config)
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        proc = subprocess.Popen([VOXGATE, "serve", "--config", str(tmp_path / "serve.toml"), "--engine", "fake",
                                 "--port", str(port), *args], stdout=out, stderr=subprocess.STDOUT)
    served = ServeProcess(proc, port, log)
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(served.http_url + "/health", timeout=1).status_code == 200:
                    break
            assert proc.poll() is None, served.log_text()
            assert time.monotonic() < deadline, "voxgate serve did not become healthy in 30 s"
            time.sleep(0.05)
        yield served
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

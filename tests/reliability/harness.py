"""Helpers of the reliability suite: a `voxgate serve` process, and a bystander session that must keep speaking
without a pause over 10 ms while a test misbehaves elsewhere."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
from voxgate.gateway.client import VoxgateClient

VOXGATE = str(Path(sys.executable).with_name("voxgate"))
BYSTANDER_TEXT = "A second session keeps speaking meanwhile."  # 2.2 s of fake-engine audio


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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


@contextlib.asynccontextmanager
async def bystander(url: str, text: str = BYSTANDER_TEXT) -> AsyncIterator[VoxgateClient]:
    """A listener (client_clock pacing, the simulated player) speaking while the test misbehaves elsewhere; at the
    end its context must be done, without errors and without a pause over 10 ms."""
    import asyncio

    async with VoxgateClient(url, pacing="client_clock", voice="tone-a") as client:
        speaking = asyncio.get_running_loop().create_task(client.speak("bystander", text))
        yield client
        result = await asyncio.wait_for(speaking, 60)
        await asyncio.sleep(client.player.buffered() / client.rate + 0.05)
        assert result.event("context.done") is not None
        assert not client.errors, client.errors
        assert not client.player.gaps_over(0.010), client.player.stalls

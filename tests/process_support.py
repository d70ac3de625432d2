"""Real processes for tests: `spawn` (any command, in a session of its own, killed with its group at the end) and
`serve_process` (`voxgate serve`, yielded once /health answers): the one way tests start them. `support` re-exports
them."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import httpx

VOXGATE = str(Path(sys.executable).with_name("voxgate"))  # the venv's console command


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Spawned:
    """A process started by `spawn`; its stdout and stderr go to `log`."""

    proc: subprocess.Popen
    log: Path

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def wait_for(self, ready: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
        """Until `ready()` holds (a refused connection counts as not yet); fails at once, with the log's tail, if the
        process exits first (the timeout only guards against a hang)."""
        deadline = time.monotonic() + timeout_s
        while True:
            with contextlib.suppress(httpx.TransportError):
                if ready():
                    return
            if self.proc.poll() is not None:
                raise AssertionError(f"{Path(self.proc.args[0]).name} exited with {self.proc.returncode} before "
                                     f"{what}; the end of {self.log}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"not {what} within {timeout_s:g} s; the end of {self.log}:\n{self.log_tail()}")
            time.sleep(0.05)

    def wait_healthy(self, url: str, timeout_s: float = 30.0) -> None:
        """Until `url`/health answers 200."""
        self.wait_for(lambda: httpx.get(url + "/health", timeout=1).status_code == 200, f"{url}/health answered 200",
                      timeout_s)


Stop = Literal["terminate", "kill"]


@contextlib.contextmanager
def spawn(args: list[str], log: Path, *, cwd: Path | None = None, env: dict[str, str] | None = None,
          stop: Stop = "terminate", grace_s: float = 10.0) -> Iterator[Spawned]:
    """`args` as a process in a session of its own, logging to `log`. At the end, if still running: SIGTERM and
    up to `grace_s` to exit (`stop="kill"`: no grace); then SIGKILL to its whole process group, so that nothing it
    started (the `--gpus` supervisor's children, say) outlives the test."""
    with log.open("w") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, cwd=cwd, env=env, start_new_session=True)
    try:
        yield Spawned(proc, log)
    finally:
        if proc.poll() is None and stop == "terminate":
            proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(grace_s)
        with contextlib.suppress(ProcessLookupError, PermissionError):  # (a group left empty is gone)
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@dataclass
class ServeProcess(Spawned):
    port: int

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/v1/tts/ws"


@contextlib.contextmanager
def serve_process(log: Path, *args: str, port: int | None = None, engine: str | None = None,
                  config: Path | None = None, cwd: Path | None = None, env: dict[str, str] | None = None,
                  stop: Stop = "terminate", grace_s: float = 10.0, timeout_s: float = 30.0) -> Iterator[ServeProcess]:
    """`voxgate serve --port <port> [--config C] [--engine E] *args` as `spawn` starts it, yielded once its /health
    answers 200 (within `timeout_s`; at once, with the log's tail, if it exits first). `args` come last, so they
    override the options before them."""
    port = port or free_port()
    options = [*(["--config", str(config)] if config else []), *(["--engine", engine] if engine else [])]
    with spawn([VOXGATE, "serve", "--port", str(port), *options, *args], log, cwd=cwd, env=env, stop=stop,
               grace_s=grace_s) as spawned:
        served = ServeProcess(spawned.proc, log, port)
        served.wait_healthy(served.http_url, timeout_s)
        yield served

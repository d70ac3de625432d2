"""A gateway under test, started as a real process (`voxgate serve`) on 127.0.0.1, and its HTTP side-channels."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class GatewayStartError(RuntimeError, OSError):
    """The gateway under test did not come up (an OSError, so `voxgate bench` prints it as one line)."""


class GatewayProcess:
    """`with GatewayProcess("fake", {"device_rtf": "20"}) as gw:` ... `gw.base_url`. Waits for /health 200."""

    def __init__(
        self,
        engine: str,
        options: dict[str, str] | None = None,
        extra_args: list[str] | None = None,
        log_path: Path | None = None,
        ready_timeout_s: float = 600.0,
    ) -> None:
        self.engine = engine
        self.options = dict(options or {})
        self.extra_args = list(extra_args or [])
        self.log_path = log_path
        self.ready_timeout_s = ready_timeout_s
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.cold_start_s: float | None = None  # process start to /health 200: reported apart from every number

    @property
    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "voxgate.gateway.cli", "serve", "--engine", self.engine]
        cmd += ["--host", "127.0.0.1", "--port", str(self.port)]
        for key, value in self.options.items():
            cmd += ["--engine-option", f"{key}={value}"]
        return cmd + self.extra_args

    def __enter__(self) -> GatewayProcess:
        log = open(self.log_path, "wb") if self.log_path else subprocess.DEVNULL
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        if log is not subprocess.DEVNULL:
            log.close()
        try:
            self._wait_ready()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        self.cold_start_s = time.perf_counter() - t0
        return self

    def _wait_ready(self) -> None:
        import httpx

        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise GatewayStartError(f"the gateway exited with {self.proc.returncode}{self._last_log_line()}; "
                                        f"log: {self.log_path}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.base_url + "/health", timeout=2.0).status_code == 200:
                    return
            time.sleep(0.1)
        raise GatewayStartError(f"the gateway was not ready after {self.ready_timeout_s} s{self._last_log_line()}; "
                                f"log: {self.log_path}")

    def _last_log_line(self) -> str:
        """The server's last words (`voxgate serve` says why it stopped in one line), for a one-line error."""
        if self.log_path is None or not Path(self.log_path).exists():
            return ""
        lines = [ln for ln in Path(self.log_path).read_text(errors="replace").splitlines() if ln.strip()]
        return f": {lines[-1].strip()}" if lines else ""

    def __exit__(self, *exc: object) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)  # its own session: uvicorn and anything it started
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def gateway_base_url(url: str) -> str:
    """`--url` as the gateway's base, http(s)://HOST:PORT: its HTTP root or its WebSocket URL both name it."""
    from urllib.parse import urlsplit

    parts = urlsplit(url.strip())
    scheme = {"http": "http", "ws": "http", "https": "https", "wss": "https"}.get(parts.scheme.lower())
    if scheme is None or not parts.netloc:
        raise ValueError(f"--url {url!r}: expected the gateway's address, e.g. http://127.0.0.1:8000 or "
                         "ws://127.0.0.1:8000/v1/tts/ws")
    if parts.path.rstrip("/") not in ("", "/v1/tts/ws"):
        raise ValueError(f"--url {url!r}: the path must be / or /v1/tts/ws (the bench speaks to both HTTP endpoints "
                         "and the WebSocket)")
    return f"{scheme}://{parts.netloc}"


def get_json(base_url: str, path: str) -> Any:
    import httpx

    try:
        resp = httpx.get(base_url + path, timeout=10.0)
        return resp.json() if resp.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None


def get_text(base_url: str, path: str) -> str | None:
    import httpx

    try:
        resp = httpx.get(base_url + path, timeout=10.0)
        return resp.text if resp.status_code == 200 else None
    except httpx.HTTPError:
        return None

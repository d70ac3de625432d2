"""`voxgate serve --gpus`: one `voxgate serve` child per GPU, each on its own port, kept running.

A child that exits while the supervisor is not stopping is started again (after 1 s, doubling up to 30 s while it
keeps failing within a minute of its start; a usage or config error, exit 2, stops everything since every child
would hit it). A child that dies before it was ever ready `MAX_FAILED_STARTS` times in a row (a GPU that is not
there, a port that is taken) will not come up by retrying: the supervisor says so in one line, stops every child
and exits 1. A child tells it is ready by writing to the pipe named in its environment (`notify_ready`).

SIGTERM or SIGINT is forwarded to every child, which drains on its own (transport/shutdown.py); the
supervisor waits for all of them, and kills one only if it outlives its own hard deadline. Children run in their
own process groups, so a terminal's Ctrl-C reaches them once, through the supervisor (a second signal would cut
their grace short), and on Linux they get SIGTERM if the supervisor itself dies.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType

log = logging.getLogger("voxgate.supervisor")

RESTART_MIN_S = 1.0
RESTART_MAX_S = 30.0
STABLE_S = 60.0  # a child that ran this long before exiting is restarted after RESTART_MIN_S again
POLL_S = 0.05
USAGE_ERROR = 2  # `voxgate serve`'s exit status for a bad option or config
MAX_FAILED_STARTS = 3  # starts in a row that died before the child was ready: then the supervisor gives up
READY_FD_ENV = "VOXGATE_READY_FD"  # a child's write end of its readiness pipe
CLEAN_EXITS = (0, -signal.SIGTERM, -signal.SIGINT)  # a drained child re-raises the signal (uvicorn)
_PR_SET_PDEATHSIG = 1


@dataclass
class Child:
    device: str
    port: int
    proc: subprocess.Popen | None = None
    started_at: float = 0.0
    restart_at: float | None = None  # when a crashed child is started again
    backoff_s: float = RESTART_MIN_S
    restarts: int = 0
    ready_pipe: int | None = None  # the read end, until the child said it is ready or exited
    ready: bool = False  # this start of it reached ready (its engine warm)
    failed_starts: int = 0  # starts in a row that exited before ready

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class Supervisor:
    """Runs `command(device, port)` for each (device, port) until a signal; `stop_after_s` bounds a child's drain
    (its grace plus its own hard deadline) before the supervisor kills it."""

    def __init__(self, command: Callable[[str, int], list[str]], children: list[tuple[str, int]],
                 stop_after_s: float, max_failed_starts: int = MAX_FAILED_STARTS) -> None:
        self.command = command
        self.children = [Child(device, port) for device, port in children]
        self.stop_after_s = stop_after_s
        self.max_failed_starts = max_failed_starts
        self._signals: list[int] = []
        self._forwarded = 0
        self._kill_at: float | None = None
        self._status = 0

    def run(self) -> int:
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            for child in self.children:
                self._start(child)
            while not self._stopped():
                self._forward_signals()
                for child in self.children:
                    self._watch(child)
                time.sleep(POLL_S)
        finally:
            for child in self.children:
                self._close_pipe(child)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return self._status

    # ---- signals -----------------------------------------------------------------------------------------------

    def _on_signal(self, sig: int, frame: FrameType | None) -> None:
        self._signals.append(sig)  # acted on by the loop, outside the handler

    @property
    def stopping(self) -> bool:
        return bool(self._signals)

    def _forward_signals(self) -> None:
        if self._forwarded == len(self._signals):
            return
        if self._forwarded == 0:
            log.info("stopping: draining %d child(ren)", sum(c.alive for c in self.children))
            self._kill_at = time.monotonic() + self.stop_after_s
        self._forwarded = len(self._signals)
        for child in self.children:  # a second signal is forwarded too: it cuts the children's grace short
            if child.alive:
                assert child.proc is not None
                child.proc.send_signal(signal.SIGTERM)

    def _stopped(self) -> bool:
        if not self.stopping:
            return False
        alive = [c for c in self.children if c.alive]
        if alive and self._kill_at is not None and time.monotonic() > self._kill_at:
            for child in alive:
                assert child.proc is not None
                log.error("%s (pid %d) still runs %.0f s after SIGTERM; killing it", child.device, child.proc.pid,
                          self.stop_after_s)
                child.proc.kill()
                child.proc.wait()
            self._status = 1
            return True
        if alive or self._forwarded != len(self._signals):
            return False
        if any(c.proc is not None and c.proc.returncode not in CLEAN_EXITS for c in self.children):
            self._status = self._status or 1
        return True

    # ---- children ----------------------------------------------------------------------------------------------

    def _start(self, child: Child) -> None:
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)
        try:
            child.proc = subprocess.Popen(self.command(child.device, child.port), process_group=0,
                                          preexec_fn=_die_with_parent if sys.platform == "linux" else None,
                                          pass_fds=(write_fd,), env={**os.environ, READY_FD_ENV: str(write_fd)})
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)  # the child holds the only write end: EOF once it exits
        child.ready_pipe, child.ready = read_fd, False
        child.started_at = time.monotonic()
        child.restart_at = None
        log.info("started %s on port %d (pid %d)", child.device, child.port, child.proc.pid)

    def _check_ready(self, child: Child) -> None:
        if child.ready_pipe is None:
            return
        try:
            said = os.read(child.ready_pipe, 64)
        except BlockingIOError:  # nothing yet, the child still starts
            return
        self._close_pipe(child)
        if said:
            child.ready, child.failed_starts = True, 0
            log.info("%s on port %d is ready", child.device, child.port)

    def _close_pipe(self, child: Child) -> None:
        if child.ready_pipe is not None:
            os.close(child.ready_pipe)
            child.ready_pipe = None

    def _watch(self, child: Child) -> None:
        now = time.monotonic()
        if child.restart_at is not None:
            if not self.stopping and now >= child.restart_at:
                child.restarts += 1
                self._start(child)
            return
        if child.proc is None:
            return
        exited = child.proc.poll() is not None
        self._check_ready(child)  # after the poll: what an exited child wrote before it ended is read too
        if not exited or self.stopping:
            return
        self._close_pipe(child)
        status, ran_s = child.proc.returncode, now - child.started_at
        if status == USAGE_ERROR:
            log.error("%s exited with status 2 (a usage or config error); stopping every child", child.device)
            self._status = USAGE_ERROR
            self._signals.append(signal.SIGTERM)
            return
        if not child.ready:
            child.failed_starts += 1
            if child.failed_starts >= self.max_failed_starts:
                log.error("%s (port %d) exited before it was ready %d times in a row (last status %s); giving up: "
                          "stopping every child", child.device, child.port, child.failed_starts, status)
                self._status = 1
                self._signals.append(signal.SIGTERM)
                return
        if ran_s >= STABLE_S:
            child.backoff_s = RESTART_MIN_S
        delay = child.backoff_s
        child.backoff_s = min(RESTART_MAX_S, delay * 2)
        child.restart_at = now + delay
        before = "" if child.ready else f", before it was ready ({child.failed_starts} of {self.max_failed_starts})"
        log.warning("%s (pid %d, port %d) exited with status %s after %.1f s%s; restarting in %.0f s", child.device,
                    child.proc.pid, child.port, status, ran_s, before, delay)


def notify_ready() -> None:
    """In a supervised `voxgate serve`, once its engine is warm: tell the supervisor (nothing when unsupervised)."""
    fd = os.environ.pop(READY_FD_ENV, None)
    if fd is None:
        return
    try:
        os.write(int(fd), b"ready")
        os.close(int(fd))
    except (OSError, ValueError):  # not a pipe of ours (an inherited environment): nobody is waiting
        pass


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the supervisor dies, so no orphan holds a GPU."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)

"""The forced aligner in a child process of its own (engine option `aligner_process`), meant to run under NVIDIA MPS.

In a thread beside the loop (worker.py) the aligner shares one GIL with the event loop and the engine loop's worker:
its host work (resampling, features, prompts, the repair) runs while theirs waits, and each CUDA call it makes lets
the GIL go and queues to take it back behind them. In a child process it has a GIL of its own. Its CUDA work gets a
context of its own too: without MPS the GPU time-slices between the two processes' contexts (measured on an H100,
2026-12-06: no faster than the thread, c = 128 15 % slower), under MPS (`nvidia-cuda-mps-control -d` before the
server starts) both processes' kernels share the SMs as two streams of one process do.

The parent keeps everything the streams see: the queue, the gathering, the batches, cancels, errors and metrics are
an `AlignerWorker`'s, whose aligner is a `ChildAligner`: its `align_batch` writes the clips into shared memory,
sends their lengths and texts through a pipe and waits (without the GIL) for the words and the call's parts. The
child loads the checkpoint and measures what it is sent with an `AlignerWorker` of its own (graphs, its CUDA
stream and priority, the warm-up), one batch at a time.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import threading
from multiprocessing.connection import Connection
from multiprocessing.shared_memory import SharedMemory
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..words import WordTime

log = logging.getLogger("voxgate.engine.aligner")

_FLOAT = np.dtype(np.float32)
_FIRST_SEGMENT_BYTES = 1 << 24  # 16 MB of clips (~170 s at 24 kHz); a larger batch gets a larger segment
_MPS_PIPE_DEFAULT = "/tmp/nvidia-mps"  # the MPS control daemon's pipe directory unless CUDA_MPS_PIPE_DIRECTORY says


def mps_running() -> bool:
    """Whether an MPS control daemon answers in this process's pipe directory (its `control` pipe exists)."""
    return (Path(os.environ.get("CUDA_MPS_PIPE_DIRECTORY", _MPS_PIPE_DEFAULT)) / "control").exists()


class ChildAligner:
    """`align_batch` answered by an aligner loaded in a child process; `close()` ends the process. After each call,
    `last_parts` and `last_host_cpu` are the child's aligner's (align.py)."""

    def __init__(self, path: str, device: torch.device | str, dtype: torch.dtype, options: dict[str, Any],
                 worker: type) -> None:
        """Starts the child and returns once it has loaded, captured and warmed up its aligner (it prints their
        progress); an error there is raised here, as one line. `worker`: the AlignerWorker class the child runs
        (`worker.load(path, device, dtype, **options)`, then `measure` per batch)."""
        if torch.device(device).type == "cuda" and not mps_running():
            log.warning("aligner_process without an MPS daemon: the GPU time-slices between the loop's process and "
                        "the aligner's; start `nvidia-cuda-mps-control -d` before the server (docs/aligner.md)")
        ctx = multiprocessing.get_context("spawn")  # never fork a process that holds a CUDA context
        self._conn, child_end = ctx.Pipe()
        self._process = ctx.Process(target=serve, args=(child_end, worker, path, str(device), dtype, options),
                                    name="voxgate-aligner", daemon=True)
        self._process.start()
        child_end.close()
        self._segment: SharedMemory | None = None
        self._lock = threading.Lock()  # one call at a time (the worker's thread makes them)
        self.last_parts: dict[str, float] = {}
        self.last_host_cpu = 0.0
        try:
            self._receive()
        except Exception:
            self.close()
            raise

    def align_batch(self, audios_24k: list[np.ndarray], texts: list[str]) -> list[list[WordTime]]:
        """Aligner.align_batch, in the child."""
        if len(audios_24k) != len(texts):
            raise ValueError(f"{len(audios_24k)} clips for {len(texts)} texts")
        lengths = [len(a) for a in audios_24k]
        with self._lock:
            segment = self._room(sum(lengths) * _FLOAT.itemsize)
            clips = np.ndarray((sum(lengths),), _FLOAT, buffer=segment.buf)
            offset = 0
            for audio, n in zip(audios_24k, lengths, strict=True):
                clips[offset: offset + n] = audio
                offset += n
            del clips  # no view of the buffer may outlive the call: a segment with one cannot be closed
            self._send(("align", segment.name, lengths, texts))
            answer, self.last_parts, self.last_host_cpu = self._receive()
        return [[WordTime(*w) for w in words] for words in answer]

    def close(self, timeout_s: float = 30.0) -> None:
        with self._lock:
            try:
                self._conn.send(("stop",))
            except OSError:
                pass  # gone already
            self._process.join(timeout_s)
            if self._process.is_alive():
                self._process.kill()
                self._process.join(5.0)
            self._conn.close()
            if self._segment is not None:
                self._segment.close()
                self._segment.unlink()
                self._segment = None

    def _room(self, nbytes: int) -> SharedMemory:
        """The shared segment, grown (a new one, at least twice the old) when a batch's clips do not fit."""
        if self._segment is None or self._segment.size < nbytes:
            size = max(nbytes, _FIRST_SEGMENT_BYTES, 2 * self._segment.size if self._segment else 0)
            if self._segment is not None:
                self._segment.close()
                self._segment.unlink()
            self._segment = SharedMemory(create=True, size=size)
        return self._segment

    def _send(self, message: tuple) -> None:
        try:
            self._conn.send(message)
        except OSError:
            raise self._gone() from None

    def _receive(self) -> Any:
        try:
            kind, value = self._conn.recv()
        except (EOFError, OSError):
            raise self._gone() from None
        if kind == "error":
            raise RuntimeError(value)
        return value

    def _gone(self) -> RuntimeError:
        self._process.join(1.0)
        return RuntimeError(f"the aligner process exited (code {self._process.exitcode})")


def serve(conn: Connection, worker_class: Any, path: str, device: str, dtype: torch.dtype,
          options: dict[str, Any]) -> None:
    """The child: load the aligner, say ready, then answer each ("align", segment, lengths, texts) with the words
    and the call's parts, until "stop" or the parent's end of the pipe closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent's Ctrl+C reaches its group: the parent stops us
    try:
        worker = worker_class.load(path, torch.device(device), dtype, None, **options)
    except Exception as exc:
        conn.send(("error", f"loading the aligner failed: {type(exc).__name__}: {exc}"))
        return
    conn.send(("ready", None))
    segment: SharedMemory | None = None
    try:
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                break  # the parent is gone
            if message[0] == "stop":
                break
            _, name, lengths, texts = message
            if segment is None or segment.name != name:
                if segment is not None:
                    segment.close()
                segment = SharedMemory(name=name)
            clips = np.ndarray((sum(lengths),), _FLOAT, buffer=segment.buf)
            ends = np.cumsum(lengths)
            audios = [clips[end - n: end].copy() for n, end in zip(lengths, ends, strict=True)]  # no view outlives
            del clips
            answers = worker.measure(audios, texts)
            error = next((a for a in answers if isinstance(a, BaseException)), None)
            if error is not None:
                conn.send(("error", f"{type(error).__name__}: {error}"))
                continue
            words = [[(w.word, w.start, w.end) for w in timed] for timed in answers]
            conn.send(("words", (words, worker.aligner.last_parts, worker.aligner.last_host_cpu)))
    finally:
        worker.close()
        if segment is not None:
            segment.close()

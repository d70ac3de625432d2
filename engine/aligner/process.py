"""The forced aligner in a child process of its own (engine option `aligner_process`).

In a thread beside the loop (worker.py), the aligner shares one GIL with the event loop and the engine loop's
worker: its host work (features, prompts, index tensors, the repair) runs while theirs waits, and every CUDA call
it makes lets go of the GIL and waits to take it back, behind them. In a child process it has a GIL of its own,
and its CUDA work a context of its own (the GPU time-slices between the two processes' contexts).

The parent keeps everything the streams see: the queue, the batching, cancels, errors and metrics are an
`AlignerWorker`'s, whose aligner is a `ChildAligner`: its `align_batch` writes the clips into shared memory, sends
their lengths and texts through a pipe and waits (without the GIL) for the words. The child loads the checkpoint
and measures what it is sent with an `AlignerWorker` of its own (graphs, its CUDA stream, the warm-up), one batch
at a time.
"""

from __future__ import annotations

import logging
import multiprocessing
import signal
import threading
from multiprocessing.connection import Connection
from multiprocessing.shared_memory import SharedMemory
from typing import Any

import numpy as np
import torch

from ..words import WordTime

log = logging.getLogger("voxgate.engine.aligner")

_FLOAT = np.dtype(np.float32)
_FIRST_SEGMENT_BYTES = 1 << 24  # 16 MB of clips (~170 s at 24 kHz); a larger batch gets a larger segment


class ChildAligner:
    """`align_batch` answered by an aligner loaded in a child process; `close()` ends the process."""

    def __init__(self, path: str, device: torch.device | str, dtype: torch.dtype, options: dict[str, Any],
                 worker: type) -> None:
        """Starts the child and returns once it has loaded, captured and warmed up its aligner (it prints their
        progress); an error there is raised here, as one line. `worker`: the AlignerWorker class the child runs
        (`worker.load(path, device, dtype, **options)`, then `measure` per batch)."""
        ctx = multiprocessing.get_context("spawn")  # never fork a process that holds a CUDA context
        self._conn, child_end = ctx.Pipe()
        self._process = ctx.Process(target=serve, args=(child_end, worker, path, str(device), dtype, options),
                                    name="voxgate-aligner", daemon=True)
        self._process.start()
        child_end.close()
        self._segment: SharedMemory | None = None
        self._lock = threading.Lock()  # one call at a time (the worker's thread makes them)
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
            answer = self._receive()
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
    """The child: load the aligner, say ready, then answer each ("align", segment, lengths, texts) with the words,
    until "stop" or the parent's end of the pipe closes."""
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
            answers = worker.measure(audios, texts)
            del clips
            error = next((a for a in answers if isinstance(a, BaseException)), None)
            conn.send(("error", f"{type(error).__name__}: {error}") if error is not None else
                      ("words", [[(w.word, w.start, w.end) for w in words] for words in answers]))
    finally:
        worker.close()
        if segment is not None:
            segment.close()


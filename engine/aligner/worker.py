"""The forced aligner beside the engine loop: one thread owns an `Aligner` and measures segments as they come.

Streams submit `AlignJob`s (a segment's complete audio and its text) from the event loop; the worker takes every
job waiting (up to MAX_BATCH; jobs no listener waits on may first wait `gather_s` for more, while other streams
may still bring some: `expect`), drops the cancelled
ones and measures the rest with one `Aligner.align_batch` call, then hands each job its words (or the error)
through its `deliver` callback, on the worker thread. The TTS step loop never waits for it: the aligner has its
own thread and, on CUDA, its own CUDA stream, so its kernels queue beside the steps' instead of behind them on the
default stream.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from prometheus_client import CollectorRegistry

from ..metrics import AlignerMetrics
from ..words import WordTime
from .align import INPUT_RATE, Aligner
from .call_profile import CallProfile, ProfileWindow
from .config import CHUNK_FRAMES
from .decoder_graphs import GRAPH_STEPS, MAX_CLIPS
from .encoder_graphs import MAX_CHUNKS
from .features import HOP, SAMPLE_RATE

log = logging.getLogger("voxgate.engine.aligner")

# Segments measured in one call. The H200 bench ran 128 clips of 3 s in one call (0.51 ms of GPU per audio second,
# docs/aligner.md); a sentence is longer, and one call's activations grow with clips x the longest prompt, so the
# worker takes fewer and leaves the rest to the next call.
MAX_BATCH = 64

# The worker's CUDA stream: "normal" as the loop's (the legacy default stream), or "high", the device's highest
# (torch maps a number past the range to its end), so the GPU's block scheduler starts the aligner's blocks before
# the loop's whenever both wait for an SM. Its graphs replay at the priority of the stream they are launched into.
PRIORITIES = {"normal": 0, "high": -(1 << 10)}


def audio_chunks(audio_24k: np.ndarray) -> int:
    """The encoder's 1-s chunks of a 24 kHz clip (resampled to 16 kHz, 100 mel frames a chunk)."""
    frames = len(audio_24k) * SAMPLE_RATE // INPUT_RATE // HOP
    return max(1, -(-frames // CHUNK_FRAMES))


@dataclass(eq=False, slots=True)
class AlignJob:
    audio: np.ndarray  # the segment's audio: float32 in [-1, 1] at 24 kHz, complete
    text: str  # its text: its words are engine.words.text_words(text)
    # Called once on the worker thread: (words, None) or (None, the error). Not called for a job cancelled before
    # its batch was taken.
    deliver: Callable[[list[WordTime] | None, BaseException | None], None]
    cancelled: bool = False  # set by the stream's owner; a plain write, read when the worker takes its batch
    chunks: int = 0  # the encoder's 1-s chunks of `audio` (audio_chunks), set when submitted
    # A listener's audio waits for the answer (a held stream): its call starts at once. Not held: its call may wait
    # up to the worker's `gather_s` from `submitted` (time.monotonic(), set when submitted) for more jobs.
    hold: bool = True
    submitted: float = 0.0


class AlignerWorker:
    """Measures submitted jobs on its own thread, in batches; `close()` ends it (pending jobs get an error)."""

    def __init__(self, aligner: Aligner, max_batch: int = MAX_BATCH, warmup: bool = False,
                 graphs: bool = False, encoder_graphs: bool = False, graph_clips: int = MAX_CLIPS,
                 graph_chunks: int = MAX_CHUNKS, graph_steps: int = GRAPH_STEPS,
                 prefill_attention: bool = False, priority: str = "normal", profile: str | None = None,
                 gather_s: float = 0.0) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        if gather_s < 0:
            raise ValueError("gather_s must be >= 0")
        # A call of jobs no listener waits on starts once the oldest has waited gather_s, the waiting jobs fill a
        # call (behind()) or a held job comes: fewer, fuller calls, since a call's time beside a busy loop hardly
        # follows its clips (docs/aligner.md). 0: every call starts as soon as the worker is free.
        self.gather_s = gather_s
        self.aligner = aligner
        # CUDA graphs captured on this thread before the warm-up (CUDA only): the packed decoder's for calls of up
        # to graph_clips clips, the encoder's for up to graph_chunks 1-s chunks (larger calls run eagerly)
        self.graphs, self.encoder_graphs = graphs, encoder_graphs
        self.graph_clips, self.graph_chunks, self.graph_steps = graph_clips, graph_chunks, graph_steps
        if prefill_attention and aligner.thinker.lm_head.weight.is_cuda:
            aligner.use_prefill_attention()  # the packed decoder's attention by blocks of a clip's tokens (Triton)
        # A call that fits the graphs replays them; a larger one runs eagerly, ~550 launches from this thread under
        # the GIL beside the loop's worker. So the graphs' sizes bound a batch too: graph_clips clips (decoder
        # graphs) and graph_chunks seconds of audio (encoder graphs), and the jobs past them wait for the next call.
        self.max_batch = min(max_batch, graph_clips) if graphs else max_batch
        self.max_chunks: int | None = graph_chunks if encoder_graphs else None
        if priority not in PRIORITIES:
            raise ValueError(f"priority must be one of {', '.join(PRIORITIES)}, not {priority!r}")
        self.priority = priority  # of the worker's CUDA stream (PRIORITIES)
        window = ProfileWindow.parse(profile)  # engine option aligner_profile (call_profile.py)
        self.profile = CallProfile(window, aligner.thinker.lm_head.weight.device) if window else None
        self.stream: torch.cuda.Stream | None = None  # the worker's CUDA stream, once its thread has made it
        self.warmup = warmup  # one untimed call on the worker's thread and stream before the first job
        self.batches = 0  # align_batch calls made
        self.metrics: AlignerMetrics | None = None  # observed after every call, on the worker thread
        self._warmed = threading.Event()
        self._jobs: deque[AlignJob] = deque()
        self._waiting_chunks = 0  # the chunks of the jobs in _jobs
        # Not-held streams making audio with no job waiting or in a call (expect()): each may bring a clip soon.
        # With none, a call has nothing to gather for and starts at once (one stream alone: no wait for company).
        self._expected = 0
        self._ready = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="aligner", daemon=True)
        self._thread.start()

    @classmethod
    def load(cls, path: str, device: torch.device, dtype: torch.dtype,
             registry: CollectorRegistry | None = None, **options: Any) -> AlignerWorker:
        """The aligner checkpoint at `path` (directory or repo id) on `device` in `dtype`, with a progress bar, its
        metrics in `registry`, warmed up on its thread before this returns (a first CUDA call pays for library
        handles and kernel loads: no stream's words should). `options`: the constructor's (max_batch, graphs ...)."""
        worker = cls(Aligner.from_pretrained(path, device=device, dtype=dtype, progress=True), warmup=True,
                     **options)
        worker.metrics = AlignerMetrics(registry)
        worker._warmed.wait()
        return worker

    def submit(self, job: AlignJob) -> None:
        job.chunks = audio_chunks(job.audio)
        job.submitted = time.monotonic()
        with self._ready:
            if self._closed:
                raise RuntimeError("the aligner is stopped")
            self._jobs.append(job)
            self._waiting_chunks += job.chunks
            self._ready.notify()

    def expect(self, streams: int) -> None:
        """`streams` more (or, negative, fewer) not-held streams may submit a clip soon: AlignedStream counts itself
        while it makes audio with no job out. A call of not-held clips gathers only while one may."""
        with self._ready:
            self._expected += streams
            self._ready.notify()  # one fewer may end a gathering wait

    def behind(self) -> bool:
        """Whether the jobs waiting already fill the next call (max_batch clips, or the encoder graphs' seconds):
        a clip submitted now is measured a call later at least. Cancelled jobs not yet dropped count too."""
        return len(self._jobs) >= self.max_batch or (
            self.max_chunks is not None and self._waiting_chunks >= self.max_chunks)

    def close(self, timeout_s: float = 30.0) -> None:
        with self._ready:
            self._closed = True
            self._ready.notify()
        self._thread.join(timeout_s)

    def _take(self) -> list[AlignJob] | None:
        """The next batch of live jobs (waits for one); None once closed."""
        with self._ready:
            while True:
                while self._jobs and self._jobs[0].cancelled:
                    self._waiting_chunks -= self._jobs.popleft().chunks
                if self._closed:
                    stopped = [j for j in self._jobs if not j.cancelled]
                    self._jobs.clear()
                    self._waiting_chunks = 0
                    break
                if self._jobs and (wait := self._gather_wait()) > 0:
                    self._ready.wait(wait)  # or sooner: a submit (held, or filling the call) or a close
                    continue
                if self._jobs:
                    batch: list[AlignJob] = []
                    chunks = 0
                    while self._jobs and len(batch) < self.max_batch:
                        job = self._jobs[0]
                        if not job.cancelled:
                            if batch and self.max_chunks is not None and chunks + job.chunks > self.max_chunks:
                                break  # the next call takes it: this one stays within the encoder's graphs
                            batch.append(job)
                            chunks += job.chunks
                        self._waiting_chunks -= self._jobs.popleft().chunks
                    return batch
                self._ready.wait()
        for job in stopped:
            job.deliver(None, RuntimeError("the aligner stopped"))
        return None

    def _gather_wait(self) -> float:
        """Seconds the next call still waits for more jobs (<= 0: it starts now); under `_ready`, the oldest job
        live at the head. No wait when no stream may bring one (`expect`), the call is full or a listener waits."""
        if (self.gather_s <= 0 or self._expected <= 0 or self.behind()
                or any(j.hold and not j.cancelled for j in self._jobs)):
            return 0.0
        return self._jobs[0].submitted + self.gather_s - time.monotonic()

    def _run(self) -> None:
        device = self.aligner.thinker.lm_head.weight.device
        side = None
        if device.type == "cuda":
            torch.cuda.synchronize(device)  # the weights, copied on the default stream, are in place
            side = self.stream = torch.cuda.Stream(device, priority=PRIORITIES[self.priority])
        if self.warmup:
            try:
                with torch.cuda.stream(side) if side is not None else contextlib.nullcontext():
                    if (self.graphs or self.encoder_graphs) and device.type == "cuda":
                        self.aligner.capture(decoder_graphs=self.graphs, encoder_graphs=self.encoder_graphs,
                                             max_clips=self.graph_clips, max_chunks=self.graph_chunks,
                                             steps=self.graph_steps)
                    self.aligner.align_batch([np.zeros(INPUT_RATE, np.float32)], ["Warm up."])
            except Exception:  # the streams' own calls will report it
                log.exception("aligner warm-up failed")
        self._warmed.set()
        while (batch := self._take()) is not None:
            if not batch:
                continue
            if self.profile is not None:
                self.profile.before(self.batches)
            t0 = time.perf_counter()
            try:
                # align_batch reads its results to the host (.tolist()), which waits for the side stream's work.
                with torch.cuda.stream(side) if side is not None else contextlib.nullcontext():
                    words = self.aligner.align_batch([j.audio for j in batch], [j.text for j in batch])
            except Exception as exc:  # the batch's streams end with the error; the worker goes on
                log.exception("aligner batch of %d failed", len(batch))
                for job in batch:
                    job.deliver(None, exc)
                continue
            seconds = time.perf_counter() - t0
            if self.profile is not None:
                self.profile.after(self.batches, seconds)
            self.batches += 1
            for job, timed in zip(batch, words, strict=True):
                job.deliver(timed, None)
            if self.metrics is not None:
                self.metrics.observe(len(batch), sum(len(j.audio) for j in batch) / INPUT_RATE, seconds,
                                     self.aligner.last_parts, self.aligner.last_host_cpu)

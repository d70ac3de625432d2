"""The audio side of a step: which codec pieces run, when a chunk closes, and its hand-over.

A chunk of a stream's schedule is decoded in pieces no wider than the codec's `max_width` (a call costs its widest
row times its rows: one 16-frame chunk among 1-frame ones made every row 16 wide) and handed over whole when its
last piece is back. One codec call runs a step: launched after the step and collected in the next iteration, so
the codec runs on the GPU beside the next decode step. Pure bookkeeping over `Request` numbers; the codec call
itself is the runner's (engine/qwen3tts/codec/chunk_decoder.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from .request import Request, Status
from .scheduler import Scheduler

Chunk = tuple[Request, np.ndarray]  # a stream's audio, PCM16
# ChunkAssembler._filled, where the codec's calls were not timed at capture (CPU, eager): a call's fixed cost in rows'
# worth (H200, 4 frames a row: 1 row 0.95 ms, 64 rows 4.90 ms, ~0.063 ms a row); and how full a call of pieces that
# could all wait must be to go.
CALL_ROWS = 14
ROW_MS = 0.063  # the model's row in ms
FULL_ENOUGH = 0.75
WAIT_SLACK_S = 0.5  # a playing stream's pieces wait for a fuller call only while its listener has this much left


class ChunkCalls(Protocol):
    max_width: int  # widest piece one call takes per stream

    def bucket_for(self, rows: int, width: int) -> tuple[int, int] | None:
        """The cheapest captured call (rows, width) that takes rows x width, None when none does."""
        ...

    def launch(self, chunks: Sequence[tuple[Request, int]]) -> None:
        """Start decoding each stream's next n frames (those after its num_decoded)."""
        ...

    def collect(self) -> list[Chunk]:
        """The launched call's PCM16 per chunk, in order (waits for it); [] when none is in flight."""
        ...

    @property
    def in_flight(self) -> Sequence[tuple[Request, int]]:
        """The pieces of the launched call, not yet collected."""
        ...

    @property
    def costs(self) -> dict[tuple[int, int], float]:
        """GPU ms of each captured call, timed at capture; empty where nothing was timed (CPU, eager)."""
        ...


class ChunkAssembler:
    """Owns the codec pieces between steps: launches the due ones, collects them, closes chunks (whole, early
    for a listener about to run dry, or on a stream's end) and hands their audio over."""

    def __init__(self, calls: ChunkCalls, scheduler: Scheduler, fill: bool = True) -> None:
        self.calls = calls
        self.scheduler = scheduler
        self.fill = fill  # engine option codec_fill: `_filled` picks the call's pieces (else every due piece)
        self._closing: list[bool] = []  # per piece of the call in flight: does it close its chunk
        self.first_in_flight = False  # that call closes some stream's first chunk
        self.end_in_flight = False  # that call holds the last frames of some stream that ended

    def collect(self, now: float) -> list[Chunk]:
        """The call in flight's pieces, then every chunk that closes now: whole ones, and (a chunk whose decoded
        pieces wait for frames not yet made, a stream waiting for text) those whose listener is about to run dry:
        a short chunk beats a pause."""
        handed: list[Chunk] = []
        for (request, pcm), closes in zip(self.calls.collect(), self._closing, strict=True):
            if request.status is Status.ABORTED:
                continue
            request.pcm_parts.append(pcm)
            if closes:
                handed.append(self._hand_over(request, now))
        self._closing = []
        self.first_in_flight = self.end_in_flight = False
        for request in self.scheduler.running:
            if request.pcm_parts and request.pending_frames == 0 and self.scheduler.urgent(request):
                handed.append(self._close_early(request, now))
        return handed

    def launch(self) -> bool:
        """Start the codec call of the due pieces; False when none is due."""
        pieces = self._pieces()
        if not pieces:
            return False
        self.calls.launch([(request, n) for request, n, _ in pieces])
        for request, n, closes in pieces:
            request.num_decoded += n
            request.chunk_launched += n
            if closes:
                request.num_chunks += 1
                request.chunk_launched = 0
        self._closing = [closes for _, _, closes in pieces]
        # the call closes some stream's first chunk (its first audio waits for it): known now, not rescanned a step
        self.first_in_flight = any(closes and r.first_audio_at is None for r, _, closes in pieces)
        self.end_in_flight = any(r.ended and r.pending_frames == 0 for r, _, _ in pieces)
        return True

    def finish_ended(self, now: float) -> tuple[list[Chunk], list[Request]]:
        """Streams that ended with all their audio out (nothing pending, no piece in flight) finish; one that ended
        on a piece that did not close its chunk hands over what there is first."""
        handed: list[Chunk] = []
        finished: list[Request] = []
        in_flight = {id(r) for r, _ in self.calls.in_flight}
        for request in list(self.scheduler.running):
            if request.ended and request.pending_frames == 0 and id(request) not in in_flight:
                if request.pcm_parts:
                    handed.append(self._close_early(request, now))
                self.scheduler.finish(request, Status.FINISHED)
                finished.append(request)
        return handed, finished

    def _pieces(self) -> list[tuple[Request, int, bool]]:
        """The due pieces one codec call takes (most urgent first): each joins while some bucket holds the call
        with it; a piece that does not fit waits for the next step. Then `_filled` may leave some for later."""
        chosen: list[tuple[Request, int, bool]] = []
        width = 0
        for request, n, closes in self.scheduler.due_pieces(self.calls.max_width):
            if self.calls.bucket_for(len(chosen) + 1, max(width, n)) is None:
                continue
            chosen.append((request, n, closes))
            width = max(width, n)
        return self._filled(chosen) if self.fill else chosen

    def _filled(self, pieces: list[tuple[Request, int, bool]]) -> list[tuple[Request, int, bool]]:
        """How many of the due pieces this step's call takes. A call costs a fixed part plus its bucket's rows,
        filled or not (H200, 4 frames a row: 1 row 0.95 ms, 64 rows 4.90 ms), and a stream whose listener has
        audio ahead can wait a step or two. So the pieces that cannot wait (a first chunk, a listener with less than
        WAIT_SLACK_S left, a stream that ended) go first, and the call takes as many more as make the cheapest call
        per piece. With none that cannot wait, the call goes only when its bucket is at least FULL_ENOUGH full or
        it holds at least FULL_ENOUGH of the running streams (few streams never fill a bucket); else there is no
        call this step, and the pieces join the next one."""
        if not pieces:
            return pieces
        now = self.scheduler.clock()
        waits = [not self._cannot_wait(r, now) for r, _, _ in pieces]
        order = [p for p, w in zip(pieces, waits, strict=True) if not w] + \
                [p for p, w in zip(pieces, waits, strict=True) if w]
        must = len(order) - sum(waits)
        best, best_cost, best_rows, width = 0, float("inf"), 0, 0
        for k, (_, n, _) in enumerate(order, 1):
            width = max(width, n)
            bucket = self.calls.bucket_for(k, width)
            assert bucket is not None  # _pieces took only what a bucket holds
            cost = self._call_cost(bucket) / k
            if k >= must and cost <= best_cost:
                best, best_cost, best_rows = k, cost, bucket[0]
        most_streams = len(order) >= FULL_ENOUGH * len(self.scheduler.running)
        if not must and best < FULL_ENOUGH * best_rows and not most_streams:
            return []
        return order[:best]

    def _call_cost(self, bucket: tuple[int, int]) -> float:
        """A call's cost in ms: as timed at capture (`ChunkCalls.costs`), else the H200's model, a fixed part worth
        CALL_ROWS rows plus the rows."""
        return self.calls.costs.get(bucket, (CALL_ROWS + bucket[0]) * ROW_MS)

    def _cannot_wait(self, request: Request, now: float) -> bool:
        """A first chunk, a stream that ended, or a listener with less than WAIT_SLACK_S of audio left (the urgent
        margin itself is for a chunk closed early; waiting for a fuller call must not bring a listener near it)."""
        if request.first_audio_at is None or request.ended:
            return True
        return request.deadline() - now < max(WAIT_SLACK_S, self.scheduler.config.urgent_s)

    @classmethod
    def _close_early(cls, request: Request, now: float) -> Chunk:
        """Close the open chunk before its width is reached, on the pieces decoded so far (none in flight)."""
        request.num_chunks += 1
        request.chunk_launched = 0
        return cls._hand_over(request, now)

    @staticmethod
    def _hand_over(request: Request, now: float) -> Chunk:
        """The open chunk's pieces as one chunk of audio: every frame decoded so far (no piece is in flight)."""
        parts = request.pcm_parts
        pcm = parts[0] if len(parts) == 1 else np.concatenate(parts)
        parts.clear()
        if request.first_audio_at is None:
            request.first_audio_at = now
        request.num_delivered = request.num_decoded
        return request, pcm

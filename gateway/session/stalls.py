"""Stalls: the underrun counters a client reports, validated against what the server sent, and attributed to a
context and a cause from when each frame was ready and sent.

A `playback` report is processed in O(1) whatever it claims: counters are bounded by what is physically possible
(a stall ends when audio arrives, so a track cannot have had more stalls than frames sent to it; its silence cannot
exceed the time the track has existed; positions cannot lie past what was sent), and all the stalls that are new in
one report become one `stall` message with their count.
"""

from __future__ import annotations

import bisect
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from voxgate.gateway.protocol import Playback, invalid

CAUSES = ("generation", "pacing", "network", "client")
_HISTORY_FRAMES = 3000  # about a minute of 20 ms frames per track
CLOCK_SLACK_S = 1.0  # client and server clocks, and report timing, may disagree by this much


@dataclass(slots=True)
class FrameRecord:
    pts: int
    samples: int
    ready_at: float  # the frame existed (audio synthesized and encoded)
    sent_at: float  # handed to the socket


@dataclass(slots=True)
class StallStats:
    events: int = 0
    total_ms: float = 0.0
    max_ms: float = 0.0
    by_cause: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CAUSES, 0))

    def add(self, events: int, total_ms: float, cause: str) -> None:
        """`events` stalls of `total_ms` together (one report's new stalls; their split is unknown: the mean)."""
        self.events += events
        self.total_ms += total_ms
        self.max_ms = max(self.max_ms, total_ms / events)
        self.by_cause[cause] += events

    def to_json(self) -> dict:
        return {"events": self.events, "total_ms": round(self.total_ms, 3), "max_ms": round(self.max_ms, 3),
                "by_cause": dict(self.by_cause)}


class FrameLog:
    """Recent frames of one track, by pts: four columns of plain numbers (no object per frame, so thousands of
    records per session add nothing for the garbage collector to traverse)."""

    def __init__(self) -> None:
        self._pts: deque[int] = deque(maxlen=_HISTORY_FRAMES)
        self._samples: deque[int] = deque(maxlen=_HISTORY_FRAMES)
        self._ready_at: deque[float] = deque(maxlen=_HISTORY_FRAMES)
        self._sent_at: deque[float] = deque(maxlen=_HISTORY_FRAMES)

    def record(self, frame: FrameRecord) -> None:
        self.add(frame.pts, frame.samples, frame.ready_at, frame.sent_at)

    def add(self, pts: int, samples: int, ready_at: float, sent_at: float) -> None:
        self._pts.append(pts)
        self._samples.append(samples)
        self._ready_at.append(ready_at)
        self._sent_at.append(sent_at)

    def rewind(self, pts: int) -> None:
        """Forget frames at or after `pts` (they were withdrawn by a cancel before being written)."""
        while self._pts and self._pts[-1] >= pts:
            for column in (self._pts, self._samples, self._ready_at, self._sent_at):
                column.pop()

    def find(self, pts: int) -> FrameRecord | None:
        i = bisect.bisect_right(self._pts, pts) - 1
        if i >= 0 and pts < self._pts[i] + self._samples[i]:
            return FrameRecord(self._pts[i], self._samples[i], self._ready_at[i], self._sent_at[i])
        return None

    def attribute(self, pts: int, needed_at: float, audio_ready: bool) -> str:
        """Cause of a stall that began at `pts` when playback needed it at `needed_at` (server clock).

        `audio_ready`: whether synthesized audio for that position existed but was not yet sent (used when no
        frame covers `pts` yet). A frame sent in time points at the network; the caller decides `client` (the
        player stopped before audio it had).
        """
        frame = self.find(pts)
        if frame is None:
            return "pacing" if audio_ready else "generation"
        if frame.ready_at > needed_at:
            return "generation"
        if frame.sent_at > needed_at:
            return "pacing"
        return "network"


@dataclass(slots=True)
class PlaybackReport:
    played_pts: int
    buffered_samples: int
    received_at: float


@dataclass(slots=True)
class NewStalls:
    """The stalls one report revealed: where, in which context (its id; None: none known), why, how many, how
    long. `context` is the Context itself while the track still holds it (its `context.done` may yet report them)."""

    context_id: str | None
    context: Any
    pts: int
    cause: str
    events: int
    total_ms: float
    needed_at: float  # when the listener ran dry (server clock)
    loop_held_ms: float | None = None  # `pacing`: the gateway's own event loop held up meanwhile (set by the session)

    def to_json(self, track: int) -> dict[str, Any]:
        msg = {"type": "stall", "context_id": self.context_id, "track": track, "pts": self.pts,
               "duration_ms": round(self.total_ms, 3), "cause": self.cause, "events": self.events}
        if self.loop_held_ms is not None:
            msg["loop_held_ms"] = round(self.loop_held_ms, 3)
        return msg


class PlayHistory:
    """The contexts a track started, oldest first, as two columns (start pts, context id), so that a stall reported
    after its context ended is still placed. Plain numbers and strings, no Context object: a busy session would
    otherwise keep its last 64 contexts (with their tasks, queues and encoders, ~20 container objects each) alive
    for the garbage collector to traverse again and again (docs/benchmarks/gateway-2core/gc-lag/report.md)."""

    def __init__(self, maxlen: int = 64) -> None:
        self._start_pts: deque[int] = deque(maxlen=maxlen)
        self._ids: deque[str] = deque(maxlen=maxlen)

    def add(self, start_pts: int, context_id: str) -> None:
        self._start_pts.append(start_pts)
        self._ids.append(context_id)

    def find(self, pts: int) -> str | None:
        """The id of the last context started at or before `pts` (start positions never decrease on a track)."""
        i = bisect.bisect_right(self._start_pts, pts) - 1
        return self._ids[i] if i >= 0 else None


class UnderrunLedger:
    """One track's accepted underrun counters (cumulative, as clients report them) and the stalls they imply."""

    def __init__(self, rate: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.clock = clock
        self.opened_at = clock()
        self.events = 0
        self.samples = 0

    def check(self, msg: Playback, sent_pts: int, frames_sent: int) -> None:
        """Raise `invalid_message` for a report no honest player can send; O(1)."""
        u = msg.underruns
        events, samples = u.get("events", self.events), u.get("samples", self.samples)
        alive_s = self.clock() - self.opened_at + CLOCK_SLACK_S
        if msg.played_pts + msg.buffered_samples > sent_pts:
            raise invalid(f"playback: played_pts + buffered_samples is past what was sent on track {msg.track} "
                          f"({sent_pts})")
        if events < self.events or samples < self.samples:
            raise invalid("playback: underruns counters are cumulative and cannot decrease")
        if events > frames_sent:
            raise invalid(f"playback: underruns.events ({events}) exceeds the frames sent on track {msg.track} "
                          f"({frames_sent}); a stall ends when audio arrives")
        if samples > alive_s * self.rate or u.get("max_gap_ms", 0) > alive_s * 1000:
            raise invalid("playback: underruns.samples or max_gap_ms exceed the time the track has existed")
        if u.get("last_pts", 0) > sent_pts:
            raise invalid("playback: underruns.last_pts is past what was sent")

    def accept(self, msg: Playback, before: PlaybackReport | None, history: PlayHistory, current: Any,
               log: FrameLog) -> NewStalls | None:
        """Take a checked report; the stalls that are new in it, attributed, or None. `current`: the context the
        track started last (or None), the only one whose own stall counters can still reach its client."""
        events = msg.underruns.get("events", self.events)
        samples = msg.underruns.get("samples", self.samples)
        new_events, new_samples = events - self.events, samples - self.samples
        self.events, self.samples = events, samples
        if new_events <= 0:
            return None
        context_id, context, pts, cause, needed_at = self._locate(msg, before, new_samples, history, current, log)
        return NewStalls(context_id, context, pts, cause, new_events, new_samples * 1000 / self.rate, needed_at)

    def _locate(self, msg: Playback, before: PlaybackReport | None, new_samples: int, history: PlayHistory,
                current: Any, log: FrameLog) -> tuple[str | None, Any, int, str, float]:
        """Where the listener ran dry, the context playing there, and the cause.

        A player counts a stall when it ends, so the report that first shows it was taken after playback resumed:
        where and when the listener ran dry comes from the report before it."""
        if before is not None:
            dry_pts = before.played_pts + before.buffered_samples
            needed_at = before.received_at + before.buffered_samples / self.rate
        else:
            dry_pts = msg.played_pts
            needed_at = self.clock() - new_samples / self.rate
        pts = msg.underruns.get("last_pts", dry_pts)
        context_id = history.find(pts)
        context = current if current is not None and context_id == current.context_id else None
        if pts < dry_pts:
            return context_id, context, pts, "client", needed_at  # it stopped before audio it had received
        audio_ready = context is not None and context.ready_samples > 0
        return context_id, context, pts, log.attribute(pts, needed_at, audio_ready), needed_at

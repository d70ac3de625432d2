"""Stall attribution: why the listener heard silence at a position, from when its frame was ready and sent."""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass, field

CAUSES = ("generation", "pacing", "network", "client")
_HISTORY_FRAMES = 3000  # about a minute of 20 ms frames per track


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

    def add(self, duration_ms: float, cause: str) -> None:
        self.events += 1
        self.total_ms += duration_ms
        self.max_ms = max(self.max_ms, duration_ms)
        self.by_cause[cause] += 1

    def to_json(self) -> dict:
        return {"events": self.events, "total_ms": round(self.total_ms, 3), "max_ms": round(self.max_ms, 3),
                "by_cause": dict(self.by_cause)}


class FrameLog:
    """Recent frames of one track, by pts."""

    def __init__(self) -> None:
        self._frames: deque[FrameRecord] = deque(maxlen=_HISTORY_FRAMES)

    def record(self, frame: FrameRecord) -> None:
        self._frames.append(frame)

    def rewind(self, pts: int) -> None:
        """Forget frames at or after `pts` (they were withdrawn by a cancel before being written)."""
        while self._frames and self._frames[-1].pts >= pts:
            self._frames.pop()

    def find(self, pts: int) -> FrameRecord | None:
        starts = [f.pts for f in self._frames]
        i = bisect.bisect_right(starts, pts) - 1
        if i >= 0 and pts < self._frames[i].pts + self._frames[i].samples:
            return self._frames[i]
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

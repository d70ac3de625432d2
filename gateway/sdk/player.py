"""A simulated listener: a jitter buffer on a real clock that counts stalls the way the browser player does.

Used by `voxgate say`, by the pacing tests, and by anyone who wants to know what a listener would have heard.
Playback begins once `preroll` samples are buffered (or a context's last frame arrived). Running dry in the
middle of a context is a stall; it lasts until the next frame arrives, and playback resumes at once. Running dry
at a context's end or at a flush point is not a stall.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from voxgate.gateway.protocol import FLAG_FIRST, FLAG_LAST


@dataclass(slots=True)
class Stall:
    pts: int
    started_at: float
    duration_s: float


@dataclass
class SimulatedPlayer:
    rate: int
    preroll: int  # samples
    clock: Callable[[], float] = time.monotonic
    received_end: int = 0
    playing: bool = False
    anchor_pts: int = 0
    anchor_t: float = 0.0
    stalled_since: float | None = None
    boundaries: set[int] = field(default_factory=set)  # pts where running dry is not a stall
    stalls: list[Stall] = field(default_factory=list)
    underrun_samples: int = 0
    max_buffered: int = 0
    _awaiting_preroll: bool = True

    def _update(self, now: float) -> None:
        if not self.playing:
            return
        position = self.anchor_pts + (now - self.anchor_t) * self.rate
        if position < self.received_end:
            return
        dry_at = self.anchor_t + (self.received_end - self.anchor_pts) / self.rate
        self.playing = False
        self.anchor_pts = self.received_end
        if self.received_end in self.boundaries:
            self._awaiting_preroll = True  # the next context (or the text after a flush) prerolls again
        else:
            self.stalled_since = dry_at

    def position(self, now: float | None = None) -> int:
        now = self.clock() if now is None else now
        self._update(now)
        if not self.playing:
            return self.anchor_pts
        return min(self.received_end, int(self.anchor_pts + (now - self.anchor_t) * self.rate))

    def buffered(self, now: float | None = None) -> int:
        return self.received_end - self.position(now)

    def on_boundary(self, pts: int) -> None:
        """A flush point or a context's end: the player may run dry here without a stall."""
        self.boundaries.add(pts)

    def on_frame(self, pts: int, samples: int, flags: int, now: float | None = None) -> None:
        now = self.clock() if now is None else now
        self._update(now)
        if flags & FLAG_FIRST and not self.playing and self.stalled_since is None:
            self._awaiting_preroll = True
            self.anchor_pts = max(self.anchor_pts, pts)
        self.received_end = max(self.received_end, pts + samples)
        if flags & FLAG_LAST:
            self.boundaries.add(pts + samples)
            if not samples and self.stalled_since is not None and pts == self.anchor_pts:
                # An empty LAST frame where the player ran dry: that silence was the context's end, not a stall.
                self.stalled_since = None
                self._awaiting_preroll = True
                return
        self.max_buffered = max(self.max_buffered, self.received_end - self.position(now))
        if self.playing:
            return
        if self.stalled_since is not None:
            gap = max(0.0, now - self.stalled_since)
            self.stalls.append(Stall(self.anchor_pts, self.stalled_since, gap))
            self.underrun_samples += int(gap * self.rate)
            self.stalled_since = None
            self._start(now)
        elif not self._awaiting_preroll or self.received_end - self.anchor_pts >= self.preroll or flags & FLAG_LAST \
                or self.received_end in self.boundaries:
            self._start(now)

    def _start(self, now: float) -> None:
        self.playing = True
        self._awaiting_preroll = False
        self.anchor_t = now

    def report(self, track: int = 0) -> dict:
        now = self.clock()
        position = self.position(now)
        gaps = [s.duration_s for s in self.stalls]
        ongoing = 0.0 if self.stalled_since is None else now - self.stalled_since
        return {"type": "playback", "track": track, "played_pts": position,
                "buffered_samples": self.received_end - position,
                "underruns": {"events": len(self.stalls), "samples": self.underrun_samples,
                              "max_gap_ms": round(max([*gaps, ongoing], default=0.0) * 1000, 3)},
                "output_latency_ms": 0, "t_ms": round(now * 1000, 3)}

    async def drained(self) -> None:
        """Return once everything received so far has played (at once if nothing is buffered).

        Playback runs on the player's clock, so this waits exactly the buffered time, and again if more arrived."""
        while (left := self.buffered()) > 0:
            await asyncio.sleep(left / self.rate)

    def gaps_over(self, seconds: float) -> list[Stall]:
        return [s for s in self.stalls if s.duration_s > seconds]

"""Pacing of one track: how much audio may be sent now, from the client's reported playback position."""

from __future__ import annotations

import time
import weakref
from typing import Any, Protocol

from voxgate.gateway.config import PacingDefaults
from voxgate.gateway.protocol import PACING_MODES, SessionStart, invalid

from .stalls import PlaybackReport

STALE_REPORTS = 4  # reports missed before the estimate runs on the wall clock alone
TARGET_STEP_MS = 50  # target growth after a stall the server could have prevented


def negotiate_pacing(msg: SessionStart, defaults: PacingDefaults) -> dict[str, Any]:
    """The session's pacing: what `session.start` asked for over the config's defaults, or `invalid_message`."""
    pacing = {"mode": msg.pacing.get("mode", defaults.mode),
              "target_buffer_ms": msg.pacing.get("target_buffer_ms", defaults.target_buffer_ms),
              "max_buffer_ms": msg.pacing.get("max_buffer_ms", defaults.max_buffer_ms),
              "feedback_interval_ms": msg.feedback_interval_ms}
    if pacing["mode"] not in PACING_MODES:
        raise invalid(f"pacing.mode must be one of {list(PACING_MODES)}")
    if not 20 <= pacing["target_buffer_ms"] <= pacing["max_buffer_ms"] <= 10_000:
        raise invalid("pacing needs 20 <= target_buffer_ms <= max_buffer_ms <= 10000")
    return pacing


class Timeline(Protocol):
    pts: int  # samples sent on the track (the track owns it; the pacer only reads it)


class Pacer:
    """Estimates the listener's position; `allowance()` says how many samples may be sent now.

    `client_clock`: played = last report + elapsed x rate while the player is advancing, never past sent.
    `realtime`: the same with no reports: a 1x clock from the first frame, paused while nothing was sent.
    `asap`: no limit; the played position (for the engine's playback hints) runs 1x from the first frame.
    """

    def __init__(self, mode: str, rate: int, target_ms: float, max_ms: float, feedback_interval_ms: float,
                 timeline: Timeline, clock=time.monotonic) -> None:
        # Weak: the track owns its pacer, so a strong reference back would leave every ended track to the collector.
        self.timeline = weakref.proxy(timeline)
        self.mode = mode
        self.rate = rate
        self.target_ms = float(target_ms)
        self.max_ms = float(max_ms)
        self.feedback_interval_s = feedback_interval_ms / 1000
        self.clock = clock
        self._last: PlaybackReport | None = None
        self._advancing = False
        self._anchor_pts = 0  # realtime and asap: the pts and time the wall clock runs from
        self._anchor_t: float | None = None
        self._floor_pts = 0  # the last cancel point

    @property
    def sent_pts(self) -> int:
        return self.timeline.pts

    @property
    def target_samples(self) -> int:
        return int(self.target_ms * self.rate / 1000)

    def on_report(self, played_pts: int, buffered_samples: int) -> None:
        # Never before the last cancel point: audio up to there was dropped by the client, whatever it reports.
        played_pts = min(max(played_pts, self._floor_pts), self.sent_pts)
        prev = self._last
        self._advancing = buffered_samples > 0 or (prev is not None and played_pts > prev.played_pts)
        self._last = PlaybackReport(played_pts, buffered_samples, self.clock())

    @property
    def last_report(self) -> PlaybackReport | None:
        return self._last

    def on_cancel(self) -> None:
        """A cancel at the track's head: the client drops its buffered audio, so everything sent counts as played."""
        self._floor_pts = self.sent_pts
        self._last = PlaybackReport(self.sent_pts, 0, self.clock())
        self._advancing = False
        if self.mode != "client_clock":
            self._anchor_t = None

    def before_send(self) -> None:
        """The track is about to advance past `sent_pts`."""
        if self.mode != "client_clock" and (self._anchor_t is None or self.estimated_played() >= self.sent_pts):
            # The listener ran dry (or this is the first frame): the clock restarts at this frame.
            self._anchor_pts, self._anchor_t = self.sent_pts, self.clock()

    def grow_target(self) -> None:
        self.target_ms = min(self.max_ms, self.target_ms + TARGET_STEP_MS)

    def estimated_played(self) -> int:
        now = self.clock()
        if self.mode != "client_clock":
            if self._anchor_t is None:
                return self.sent_pts
            return min(self.sent_pts, self._anchor_pts + round((now - self._anchor_t) * self.rate))
        last = self._last
        if last is None:
            return 0 if self.sent_pts == 0 else self._wall_clock_estimate(now)
        elapsed = now - last.received_at
        stale = elapsed > STALE_REPORTS * self.feedback_interval_s
        if not (self._advancing or stale):
            return last.played_pts
        return min(self.sent_pts, last.played_pts + round(elapsed * self.rate))

    def _wall_clock_estimate(self, now: float) -> int:
        # Before the first report: assume playback began when the first frame went out.
        if self._anchor_t is None:
            self._anchor_t = now
        return min(self.sent_pts, round((now - self._anchor_t) * self.rate))

    def buffered(self) -> int:
        return self.sent_pts - self.estimated_played()

    def allowance(self) -> int | None:
        """Samples that may be sent now (None: unlimited)."""
        if self.mode == "asap":
            return None
        return max(0, self.target_samples - self.buffered())

    def seconds_until_allowed(self, samples: int) -> float:
        """How long until `samples` more may be sent if playback continues at 1x (a report may come sooner)."""
        missing = samples + self.buffered() - self.target_samples
        if missing <= 0:
            return 0.0
        if self.mode == "client_clock" and not self._advancing and self._last is not None:
            return self.feedback_interval_s  # the estimate moves only with the next report, which wakes the sender
        return max(0.001, missing / self.rate)

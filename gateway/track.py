"""A track: one timeline of contexts played in order, its pacer, and what its recent frames tell about stalls."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass, field

from .context import Context
from .pacer import Pacer, PlaybackReport
from .protocol import Playback
from .stalls import FrameLog
from .writer import OutFrame


@dataclass
class Track:
    number: int
    pacer: Pacer
    queue: deque[Context] = field(default_factory=deque)  # contexts in play order; the head is playing
    pts: int = 0
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    log: FrameLog = field(default_factory=FrameLog)
    played: deque[Context] = field(default_factory=lambda: deque(maxlen=64))  # recent contexts, for stalls
    underrun_events: int = 0
    underrun_samples: int = 0
    inflight: OutFrame | None = None  # a frame the sender is waiting to queue (the writer is full)
    sender: asyncio.Task | None = None

    def find_stall(self, msg: Playback, before: PlaybackReport | None, new_samples: int,
                   rate: int) -> tuple[Context | None, int, str]:
        """Where the listener of this track ran dry, the context playing there, and the cause."""
        if before is not None:
            # The listener had `buffered` samples at the previous report: it ran dry there, that much later.
            dry_pts = before.played_pts + before.buffered_samples
            needed_at = before.received_at + before.buffered_samples / rate
        else:
            dry_pts = msg.played_pts
            needed_at = time.monotonic() - new_samples / rate
        pts = msg.underruns.get("last_pts", dry_pts)
        context = next((c for c in reversed(self.played) if c.started and c.start_pts <= pts), None)
        if pts < dry_pts:
            return context, pts, "client"  # the player stopped before audio it had already received
        audio_ready = context is not None and context.ready_samples > 0
        return context, pts, self.log.attribute(pts, needed_at, audio_ready)

    def stall_causes(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for context in self.played:
            for cause, n in context.stalls.by_cause.items():
                out[cause] = out.get(cause, 0) + n
        return out

"""A session's messages kept within the `limits.max_messages_per_s` its `session.started` announces.

The server drops what comes faster (`rate_limited`: a token bucket of that rate, bursts of twice it). A client that
sends as fast as it can (a closed loop against an engine that answers in milliseconds, several LLM-fed turns of one
session at once) would lose messages, text among them. `MessagePacer` makes it wait instead.
"""

from __future__ import annotations

import asyncio
import time


class MessagePacer:
    """A token bucket at the session's rate holding a second's worth, half the burst the server allows, so that
    messages bunched on the way never trip `rate_limited`. `rate` None or 0: no limit announced, no wait."""

    def __init__(self, rate: float | None) -> None:
        self.rate = rate if rate and rate > 0 else None
        self.tokens = self.rate or 0.0
        self.at = time.monotonic()

    async def take(self, n: int = 1) -> float:
        """Wait until `n` messages may go (all at once), take them; the seconds waited."""
        if self.rate is None:
            return 0.0
        n = min(float(n), self.rate)  # never more than the bucket holds
        waited = 0.0
        while True:
            now = time.monotonic()
            self.tokens = min(self.rate, self.tokens + (now - self.at) * self.rate)
            self.at = now
            if self.tokens >= n:
                self.tokens -= n
                return waited
            pause = (n - self.tokens) / self.rate
            await asyncio.sleep(pause)
            waited += pause

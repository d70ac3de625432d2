"""The listener's pause rule (shared/design/benchmarks.md, "Playback model"), implemented once.

Playback starts when the first chunk arrives. Each chunk adds its duration to a running deadline. A chunk that
arrives after the deadline is a pause of (arrival - deadline); playback resumes at its arrival, so the deadline
restarts there. Early buffer therefore absorbs later jitter only as far as it really lasts.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(slots=True)
class Playback:
    """What a listener heard: every pause (seconds, in order) and the audio's total duration."""

    pauses: list[float] = field(default_factory=list)
    audio_s: float = 0.0
    start: float | None = None  # arrival of the first chunk
    end: float | None = None  # when playback of the last chunk ends

    @property
    def num_pauses(self) -> int:
        return len(self.pauses)

    @property
    def total_pause_s(self) -> float:
        return sum(self.pauses)

    @property
    def max_pause_s(self) -> float:
        return max(self.pauses, default=0.0)


def listen(chunks: Iterable[tuple[float, float]]) -> Playback:
    """Apply the pause rule to `(arrival_time_s, duration_s)` chunks, given in arrival order."""
    playback = Playback()
    deadline: float | None = None
    previous = float("-inf")
    for arrival, duration in chunks:
        if duration < 0:
            raise ValueError(f"chunk duration must be non-negative, got {duration}")
        if arrival < previous:
            raise ValueError(f"arrivals must be in order: {arrival} after {previous}")
        previous = arrival
        if deadline is None:  # playback starts with the first chunk
            playback.start = deadline = arrival
        elif arrival > deadline:  # the player ran dry: a pause, and playback resumes at this arrival
            playback.pauses.append(arrival - deadline)
            deadline = arrival
        deadline += duration
        playback.audio_s += duration
    playback.end = deadline
    return playback

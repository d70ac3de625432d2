"""The listener's pause rule (shared/design/benchmarks.md, "Playback model"), implemented once.

Playback starts when the first chunk arrives. Each chunk adds its duration to a running deadline. A chunk that
arrives after the deadline is a pause of (arrival - deadline); playback resumes at its arrival, so the deadline
restarts there. Early buffer therefore absorbs later jitter only as far as it really lasts.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import accumulate

# Chunk offsets are sums of float durations: a position this close below a chunk's first sample (far less than one
# sample at any rate) is that sample, so a word that starts on a frame boundary belongs to the frame starting there.
POSITION_EPS_S = 1e-9


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


def _play(chunks: Iterable[tuple[float, float]]) -> Iterator[tuple[float, float, float]]:
    """The rule, chunk by chunk: (when the chunk starts playing, the pause before it or 0.0, its duration)."""
    deadline: float | None = None
    previous = float("-inf")
    for arrival, duration in chunks:
        if duration < 0:
            raise ValueError(f"chunk duration must be non-negative, got {duration}")
        if arrival < previous:
            raise ValueError(f"arrivals must be in order: {arrival} after {previous}")
        previous = arrival
        pause = 0.0
        if deadline is None:  # playback starts with the first chunk
            deadline = arrival
        elif arrival > deadline:  # the player ran dry: a pause, and playback resumes at this arrival
            pause = arrival - deadline
            deadline = arrival
        yield deadline, pause, duration
        deadline += duration


def listen(chunks: Iterable[tuple[float, float]]) -> Playback:
    """Apply the pause rule to `(arrival_time_s, duration_s)` chunks, given in arrival order."""
    playback = Playback()
    for start, pause, duration in _play(chunks):
        if playback.start is None:
            playback.start = start
        if pause:
            playback.pauses.append(pause)
        playback.audio_s += duration
        playback.end = start + duration
    return playback


def heard_at(chunks: Sequence[tuple[float, float]], positions_s: Iterable[float]) -> list[tuple[int, float] | None]:
    """For each audio position (seconds from the first sample of `chunks`): the index of the chunk holding it and
    when the listener hears it under the rule (the chunk's start of play plus the position's offset in it); None
    for a position outside the audio. A position on a boundary belongs to the chunk that starts there."""
    starts = [start for start, _, _ in _play(chunks)]
    offsets = list(accumulate((duration for _, duration in chunks), initial=0.0))  # where each chunk begins
    out: list[tuple[int, float] | None] = []
    for position in positions_s:
        k = bisect_right(offsets, position + POSITION_EPS_S) - 1
        out.append((k, starts[k] + position - offsets[k]) if 0 <= k < len(starts) else None)
    return out

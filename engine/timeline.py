"""One request's way to its first audio, as stamps: each the end of a stage, stages in the order they happen.

The gateway starts a timeline when the text became speakable (the HTTP request came, a WebSocket turn's first
speakable text), the engine adds the stamps it has (`AudioStream.first_audio_stamps`) and the gateway the first
byte written; `stages()` turns them into durations that add up to the whole first-audio time. A stage an engine
does not have (the fake engine has no prefill) is absent, and the next stage present covers its time.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

# admit: to the gateway handing the stream to the engine; queue: to the step carrying its first prompt tokens
# being launched; prefill: to the step of its first frame being launched; first_frame: to that frame counted;
# codec: to its first chunk decoded; hand_over: to that chunk delivered on the event loop; write: to its first
# byte written to the socket.
STAGES = ("admit", "queue", "prefill", "first_frame", "codec", "hand_over", "write")


@dataclass(slots=True)
class FirstAudioTimeline:
    start: float  # time.monotonic() the text became speakable
    ends: dict[str, float] = field(default_factory=dict)  # stage -> time.monotonic() it ended

    def stamp(self, stage: str, at: float | None = None) -> None:
        """The stage ended now (or `at`); the first stamp of a stage stays."""
        if stage not in STAGES:
            raise ValueError(f"unknown first-audio stage {stage!r}")
        self.ends.setdefault(stage, time.monotonic() if at is None else at)

    def stages(self) -> list[tuple[str, float]]:
        """(stage, seconds) of the stages stamped, in order; each from the stage stamped before it (a stamp taken
        on another thread that reads a hair earlier than the one before counts as zero, never negative)."""
        out: list[tuple[str, float]] = []
        last = self.start
        for stage in STAGES:
            end = self.ends.get(stage)
            if end is None:
                continue
            end = max(end, last)
            out.append((stage, end - last))
            last = end
        return out

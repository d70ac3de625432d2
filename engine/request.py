"""One stream's state in the engine loop (nano-vllm's `Sequence`, for audio frames instead of tokens).

Plain Python, no tensors: the scheduler decides from these numbers, the runner reads `slot`, `num_prompt_tokens`
and `num_launched` to fill a step's inputs, and postprocess advances them. Times are `time.monotonic()` seconds.
"""

from __future__ import annotations

import enum
import itertools
import time
from dataclasses import dataclass, field
from typing import Any

FRAME_S = 0.08  # one 12.5 Hz codec frame of audio

_ids = itertools.count(1)


class Status(enum.Enum):
    WAITING = "waiting"  # admitted by the engine, no slot yet
    RUNNING = "running"  # holds a slot: prefilling, decoding, or finishing its last chunk
    FINISHED = "finished"  # ended (EOS, budget) and every frame decoded; slot freed
    ABORTED = "aborted"  # cancelled or failed; slot freed


@dataclass(eq=False, slots=True)
class Request:
    """One stream. `prompt` is the runner's payload (token rows); the engine core never looks inside it."""

    prompt: Any
    num_prompt_tokens: int
    frame_budget: int  # frames at most (the runaway guard; what ends streams of random weights)
    chunk_schedule: tuple[int, ...]  # codec chunk widths in frames: first, second, ...; the last repeats
    sampling: Any = None  # the runner's per-row sampling parameters
    request_id: int = field(default_factory=lambda: next(_ids))
    arrival: float = field(default_factory=time.monotonic)
    status: Status = Status.WAITING
    slot: int = -1
    num_prefilled: int = 0  # prompt tokens launched through the Talker (prefill may span steps)
    num_frames: int = 0  # frames generated (an EOS sample is not a frame)
    num_launched: int = 0  # frames whose step was launched: num_frames, or one more while a step is in flight
    num_decoded: int = 0  # frames already through the codec (or on their way: a piece in flight)
    num_delivered: int = 0  # frames handed to the listener: a chunk's decoded pieces wait for its last one
    num_chunks: int = 0  # codec chunks closed (their last piece launched)
    chunk_launched: int = 0  # frames of the open chunk already launched in pieces
    pcm_parts: list = field(default_factory=list)  # the open chunk's decoded pieces, handed over when it closes
    ended: bool = False  # no more frames will come (EOS or budget); pending frames still get decoded
    # Frames whose per-frame input exists (text streamed into a live stream: one text id a frame): None is no limit.
    # A stream at its limit takes no row until more text comes or its text ends (the runner sets it back to None).
    frames_ready: int | None = None
    finish_reason: str | None = None  # "eos" | "budget" | "aborted" | "error"
    first_step_at: float | None = None  # first step that ran any of its tokens (queue wait = this - arrival)
    first_audio_at: float | None = None  # when the first chunk was handed over
    # The first-audio timeline (engine/timeline.py), each stamped once: the step carrying its first prompt tokens
    # launched, the step of its first frame launched, that frame counted, its first chunk decoded.
    prefill_launched_at: float | None = None
    decode_launched_at: float | None = None
    first_frame_at: float | None = None
    first_decoded_at: float | None = None
    playback_deadline: float | None = None  # the gateway's last hint: when the listener runs dry (None: none)
    delivered_at_hint: int = 0  # num_delivered when that hint came (audio handed over since extends it)
    sink: Any = None  # where the engine loop delivers this stream's chunks

    @property
    def prefilled(self) -> bool:
        return self.num_prefilled >= self.num_prompt_tokens

    @property
    def pending_frames(self) -> int:
        return self.num_frames - self.num_decoded

    @property
    def next_chunk(self) -> int:
        return self.chunk_schedule[min(self.num_chunks, len(self.chunk_schedule) - 1)]

    @property
    def can_decode(self) -> bool:
        """Due a row in the next step: prefilled, not ended, budget left (counting a step in flight), and the
        input of its next frame there (text streamed in: not waiting for the next text id)."""
        return (self.status is Status.RUNNING and self.prefilled and not self.ended
                and self.num_launched < self.frame_budget and self.frame_input_ready)

    @property
    def frame_input_ready(self) -> bool:
        """The text id the next frame's input adds is there (text streamed in: `frames_ready`)."""
        return self.frames_ready is None or self.num_launched < self.frames_ready

    def deadline(self) -> float:
        """When this stream's listener runs out of audio. Before the first chunk: its arrival (already due).
        Without a hint: playback at 1x from the first chunk, as the benchmark's listener plays. Only audio handed
        over counts: frames decoded into an open chunk are not the listener's yet (a stream that waits for text
        fills a wide chunk slowly, and its listener can run dry meanwhile)."""
        if self.playback_deadline is not None:
            return self.playback_deadline + (self.num_delivered - self.delivered_at_hint) * FRAME_S
        if self.first_audio_at is None:
            return self.arrival
        return self.first_audio_at + self.num_delivered * FRAME_S

    def generation_deadline(self) -> float:
        """When the next frame must exist: frames generated but not yet handed over reach the listener with the
        next chunk, so they extend the delivered audio."""
        return self.deadline() + (self.num_frames - self.num_delivered) * FRAME_S

    def report_playback(self, buffered_s: float, now: float | None = None) -> None:
        """The gateway's hint (AudioStream.report_playback): audio handed over but not yet played, in seconds."""
        now = time.monotonic() if now is None else now
        # Two attributes written from the event loop, read by the engine thread: a torn pair only misplaces one
        # step's priority, never a result.
        self.delivered_at_hint = self.num_delivered
        self.playback_deadline = now + max(0.0, buffered_s)

    def __repr__(self) -> str:
        return (f"Request(id={self.request_id}, {self.status.value}, slot={self.slot}, "
                f"prefill={self.num_prefilled}/{self.num_prompt_tokens}, frames={self.num_frames}/"
                f"{self.frame_budget}, decoded={self.num_decoded}, ended={self.ended})")

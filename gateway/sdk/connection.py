"""`connect()`: one session with the gateway, on `VoxgateClient` (gateway/sdk/protocol_client.py), serving turns."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from voxgate.client.protocol_client import SessionError, VoxgateClient
from voxgate.gateway.protocol import FrameHeader

from .turn import AudioChunk, StallReport, Turn, VoxgateError
from .words import Word


class _Client(VoxgateClient):
    """The protocol client, routing each decoded frame and each context message to its turn."""

    def __init__(self, url: str, **options: Any) -> None:
        super().__init__(url, **options)
        self.turns: dict[str, Turn] = {}

    def _on_message(self, msg: dict[str, Any]) -> None:
        super()._on_message(msg)
        turn = self.turns.get(msg.get("context_id", ""))
        if turn is not None:
            turn._on_message(msg)

    def _on_frame(self, data: bytes, now: float) -> None:
        super()._on_frame(data, now)
        header = FrameHeader.unpack(data)
        result = self.by_handle[header.ctx]
        turn = self.turns.get(result.context_id)
        if turn is not None and header.samples:  # (an empty LAST frame carries no audio: no chunk)
            turn._on_chunk(AudioChunk(result.pcm[-1], header.pts, header.samples, self.rate, header.track, now))
            # The turn owns its audio now: the protocol client's per-context copies would grow with the session.
            result.pcm.clear()
            result.frames.clear()

    async def _receive(self) -> None:
        try:
            await super()._receive()
        finally:  # the session is over: every turn still waiting learns why
            error = self.closed_error()
            for turn in self.turns.values():
                turn._fail(error)

    def closed_error(self) -> VoxgateError:
        last = next((e for e in reversed(self.errors) if e["type"] == "error" and "context_id" not in e), None)
        if last is not None:
            return VoxgateError.from_message(last, self.close_code)
        return VoxgateError("closed", "the server closed the session", close_code=self.close_code)


class Connection:
    """A session. `async with connect(...) as tts:` then `tts.speak(tokens)` or `tts.context()` per turn."""

    def __init__(self, url: str, *, voice: str | None = None, language: str | None = None,
                 instruct: str | None = None, codec: str = "pcm_s16le", sample_rate: int | None = None,
                 pacing: str = "asap", target_buffer_ms: int = 150, max_buffer_ms: int = 1000,
                 frame_ms: int | None = None, report_playback: bool = True, token: str | None = None,
                 on_stall: Callable[[StallReport], None] | None = None, timestamps: str | None = None,
                 timestamps_hold: bool | None = None) -> None:
        self.client = _Client(url, codec=codec, sample_rate=sample_rate, pacing=pacing,
                              target_buffer_ms=target_buffer_ms, max_buffer_ms=max_buffer_ms, voice=voice,
                              language=language, report=report_playback, token=token, frame_ms=frame_ms)
        if instruct:
            self.client.start_msg["defaults"]["instruct"] = instruct
        if timestamps:  # "word": each turn's `words` (session.started says whether the engine gives them)
            self.client.start_msg["timestamps"] = timestamps
        if timestamps_hold is not None:  # False: no audio waits for its word times (docs/protocol.md)
            self.client.start_msg["timestamps_hold"] = timestamps_hold
        self.on_stall = on_stall
        self._ids = itertools.count(1)
        self._background: set[asyncio.Task] = set()

    async def __aenter__(self) -> Connection:
        try:
            await self.client.__aenter__()
        except SessionError:
            refusal = next((e for e in reversed(self.client.errors) if e["type"] == "error"), None)
            if refusal is not None:
                raise VoxgateError.from_message(refusal, self.client.close_code) from None
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        for task in self._background:
            task.cancel()
        await self.client.__aexit__()

    @property
    def sample_rate(self) -> int:
        return self.client.rate

    @property
    def session(self) -> dict[str, Any]:
        """The server's `session.started` (engine, audio format, pacing, limits, voices, defaults)."""
        return self.client.session

    @property
    def voices(self) -> list[str]:
        return list(self.client.session["voices"])

    @property
    def errors(self) -> list[dict[str, Any]]:
        """Every `error` and `warning` of the session, including those that are not any turn's."""
        return self.client.errors

    def context(self, context_id: str | None = None, *, voice: str | None = None, language: str | None = None,
                instruct: str | None = None, track: int | None = None, placement: str | None = None,
                max_audio_ms: int | None = None, on_stall: Callable[[StallReport], None] | None = None) -> Turn:
        """A new turn you write to yourself (`send`, `flush`, `end`). Opened on the server with its first message."""
        context_id = context_id or f"t{next(self._ids)}"
        if context_id in self.client.turns or context_id in self.client.contexts:
            raise ValueError(f"context id {context_id!r} was used in this session already")
        fields = {k: v for k, v in (("voice", voice), ("language", language), ("instruct", instruct),
                                    ("track", track), ("placement", placement), ("max_audio_ms", max_audio_ms))
                  if v is not None}
        turn = Turn(self, context_id, fields, on_stall or self.on_stall)
        self.client.turns[context_id] = turn
        return turn

    def speak(self, text: str | Iterable[str] | AsyncIterable[str], **context_options: Any) -> Turn:
        """A turn fed from `text`: a string, or tokens from a (async) iterator, sent as they come, then ended.
        Iterate the turn for its audio; an exception of the token source is raised there."""
        turn = self.context(**context_options)
        turn.feed(text)
        return turn

    async def clear(self) -> None:
        """Cancel every active turn (barge-in on all tracks) and wait for each acknowledgement."""
        await asyncio.gather(*(t.cancel() for t in self.client.turns.values() if t.done is None))

    async def report_playback(self, played_pts: int, *, buffered_samples: int | None = None, track: int = 0,
                              underrun_events: int = 0, underrun_samples: int = 0, max_gap_ms: float = 0.0,
                              last_stall_pts: int | None = None) -> None:
        """For `client_clock` sessions made with `report_playback=False`, where you play the audio yourself: send
        what your player has played (every `session['pacing']['feedback_interval_ms']`). Underrun counters are
        cumulative over the session; the server answers new stalls with `stall` messages (see `StallReport`)."""
        underruns: dict[str, Any] = {"events": underrun_events, "samples": underrun_samples,
                                     "max_gap_ms": max_gap_ms}
        if last_stall_pts is not None:
            underruns["last_pts"] = last_stall_pts
        message: dict[str, Any] = {"type": "playback", "track": track, "played_pts": played_pts,
                                   "underruns": underruns, "t_ms": round(time.monotonic() * 1000, 3)}
        if buffered_samples is not None:
            message["buffered_samples"] = buffered_samples
        await self.client.send(message)

    async def wait_for(self, event: asyncio.Event, turn: Turn) -> None:
        """Wait for `event`; the turn's error, or the session closing, raises instead."""
        if not event.is_set():
            waiter = asyncio.ensure_future(event.wait())
            closed = asyncio.ensure_future(self.client.closed.wait())
            try:
                await asyncio.wait([waiter, closed], return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiter.cancel()
                closed.cancel()
        if turn.error is not None:
            raise turn.error
        if not event.is_set():
            raise self.client.closed_error()

    def send_soon(self, message: dict[str, Any]) -> None:
        """Send from a callback (no await there); a closed session is ignored: the turns learn it anyway."""
        async def send() -> None:
            try:
                await self.client.send(message)
            except SessionError:
                pass

        task = asyncio.get_running_loop().create_task(send())
        self._background.add(task)
        task.add_done_callback(self._background.discard)


def connect(url: str, **options: Any) -> Connection:
    """`async with connect(url, voice=..., codec="pcm_s16le") as tts:`; options as `Connection`."""
    return Connection(url, **options)


@dataclass(frozen=True, slots=True)
class Speech:
    """A whole turn's audio: int16 mono `pcm` at `sample_rate`, with the server's `context.done` and the stalls; its
    `words` with `timestamps="word"`."""

    pcm: np.ndarray
    sample_rate: int
    done: dict[str, Any]
    stalls: list[StallReport]
    words: list[Word] = field(default_factory=list)

    @property
    def duration_s(self) -> float:
        return len(self.pcm) / self.sample_rate


async def speak(url: str, text: str | Iterable[str] | AsyncIterable[str], **options: Any) -> Speech:
    """One turn on a fresh session, all of its audio. `options`: `connect`'s (voice, codec, ...)."""
    async with connect(url, **options) as tts:
        turn = tts.speak(text)
        pcm = await turn.audio()
        assert turn.done is not None  # audio() ends at context.done, or raises
        return Speech(pcm, tts.sample_rate, turn.done, turn.stalls, turn.words)


def speak_sync(url: str, text: str | Iterable[str], **options: Any) -> Speech:
    """`speak` for code without an event loop (a script, a notebook cell without await). Not from inside a running
    loop: there, `await speak(...)`."""
    return asyncio.run(speak(url, text, **options))

"""One spoken turn (a protocol context) as the SDK shows it: text in, audio chunks out, flush, cancel, stalls."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from voxgate.client.protocol_client import SessionError

from .words import Word, WordLog

if TYPE_CHECKING:
    from .connection import Connection

TEXT_INTERVAL_S = 0.02  # at most 50 text.append a second per turn: LLM tokens are coalesced, never rate_limited


class VoxgateError(SessionError):
    """An `error` from the server (or the session closing): `code` and `message` are the server's own."""

    def __init__(self, code: str, message: str, *, context_id: str | None = None,
                 close_code: int | None = None) -> None:
        super().__init__(f"{code}: {message}" + (f" (close {close_code})" if close_code is not None else ""))
        self.code = code
        self.message = message
        self.context_id = context_id
        self.close_code = close_code

    @classmethod
    def from_message(cls, msg: dict[str, Any], close_code: int | None = None) -> VoxgateError:
        return cls(msg["code"], msg["message"], context_id=msg.get("context_id"), close_code=close_code)


@dataclass(frozen=True, slots=True)
class AudioChunk:
    """Decoded audio of one binary frame. `pts` is the position of its first sample on the track's timeline."""

    pcm: np.ndarray  # int16, mono, at sample_rate
    pts: int
    samples: int  # samples this frame adds to the timeline (the frame header's)
    sample_rate: int
    track: int
    received_at: float  # time.monotonic() on arrival

    @property
    def end_pts(self) -> int:
        return self.pts + self.samples

    @property
    def start_s(self) -> float:
        return self.pts / self.sample_rate

    @property
    def duration_s(self) -> float:
        return self.samples / self.sample_rate


@dataclass(frozen=True, slots=True)
class StallReport:
    """The server's `stall` message: silence the listener heard, where, how long, and why (docs/protocol.md)."""

    pts: int
    duration_ms: float
    cause: str  # generation | pacing | network | client
    events: int
    track: int
    loop_held_ms: float | None = None  # pacing: the gateway's own event loop held up meanwhile (a starved process)


class _End:
    """Queue sentinel: the turn has no more audio."""


class Turn:
    """A context. Iterate it for `AudioChunk`s (they end at `context.done` or a cancel); `send`, `flush`, `end` and
    `cancel` drive it. Made by `Connection.context()` or `Connection.speak()`, never directly."""

    def __init__(self, conn: Connection, context_id: str, open_fields: dict[str, Any],
                 on_stall: Callable[[StallReport], None] | None) -> None:
        self.context_id = context_id
        self.stalls: list[StallReport] = []
        self.warnings: list[dict[str, Any]] = []
        self.done: dict[str, Any] | None = None  # the context.done message
        self.cancelled: dict[str, Any] | None = None  # the context.cancelled message
        self.flushed: dict[str, int] = {}  # flush_id -> end_pts
        self.error: VoxgateError | None = None
        self._words = WordLog()  # sessions with timestamps="word"
        self._start_pts = 0  # context.started's
        self._conn = conn
        self._open_fields = open_fields
        self._on_stall = on_stall
        self._queue: asyncio.Queue[AudioChunk | _End | BaseException] = asyncio.Queue()
        self._pending: list[str] = []
        self._lock = asyncio.Lock()
        self._opened = False
        self._ended = False
        self._stopped = False  # cancel asked, or an error: yield nothing more
        self._cancel_sent = False
        self._last_sent = 0.0
        self._timer: asyncio.Task | None = None
        self._feeder: asyncio.Task | None = None
        self._flush_events: dict[str, asyncio.Event] = {}
        self._flush_count = 0

    # -- text in ------------------------------------------------------------------------------------------------

    async def send(self, text: str) -> None:
        """Append text (an LLM token, a word, a paragraph). Sent at once, or coalesced with what follows within
        `TEXT_INTERVAL_S`; the server cuts it into sentences."""
        self._check_open_for_text()
        self._pending.append(text)
        wait = self._last_sent + TEXT_INTERVAL_S - time.monotonic()
        if wait <= 0:
            await self._push()
        elif self._timer is None or self._timer.done():
            self._timer = asyncio.get_running_loop().create_task(self._push_later(wait))

    async def flush(self, flush_id: str | None = None) -> str:
        """Speak what was sent so far now, even mid-sentence; returns the flush id (see `wait_flushed`)."""
        self._check_open_for_text()
        self._flush_count += 1
        flush_id = flush_id or f"f{self._flush_count}"
        self._flush_events[flush_id] = asyncio.Event()
        await self._push({"type": "context.flush", "context_id": self.context_id, "flush_id": flush_id})
        return flush_id

    async def wait_flushed(self, flush_id: str) -> int:
        """Wait for the server's `flushed` (after the flushed text's last frame); returns its end_pts."""
        await self._conn.wait_for(self._flush_events[flush_id], self)
        return self.flushed[flush_id]

    async def end(self) -> None:
        """No more text: the turn finishes speaking and its iteration ends at `context.done`."""
        if self._ended or self._stopped:
            return
        await self._push({"type": "context.end", "context_id": self.context_id})
        self._ended = True

    def _check_open_for_text(self) -> None:
        if self.error is not None:
            raise self.error
        if self._ended or self._stopped:
            raise RuntimeError(f"turn {self.context_id!r} has ended or was cancelled; open a new one")

    async def _push_later(self, wait: float) -> None:
        await asyncio.sleep(wait)
        await self._push()

    async def _push(self, then: dict[str, Any] | None = None) -> None:
        """Send the pending text (opening the context first), then `then`, in order."""
        async with self._lock:
            if self._stopped:
                return
            if not self._opened:
                await self._conn.client.send({"type": "context.open", "context_id": self.context_id,
                                              **self._open_fields})
                self._opened = True
            if self._pending:
                text, self._pending = "".join(self._pending), []
                self._conn.client.context(self.context_id).sent_at = time.monotonic()
                await self._conn.client.send({"type": "text.append", "context_id": self.context_id, "text": text})
                self._last_sent = time.monotonic()
            if then is not None:
                await self._conn.client.send(then)

    def feed(self, text: str | Iterable[str] | AsyncIterable[str]) -> None:
        """Send `text` (a string, or tokens from an iterator) in a task, then end the turn."""
        self._feeder = asyncio.get_running_loop().create_task(self._feed(text))

    async def _feed(self, text: str | Iterable[str] | AsyncIterable[str]) -> None:
        try:
            if isinstance(text, str):
                await self.send(text)
            elif isinstance(text, AsyncIterable):
                async for token in text:
                    if self._stopped:
                        return
                    await self.send(token)
            else:
                for token in text:
                    await self.send(token)
            await self.end()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the token source failed: no more audio, the consumer gets the exception
            if exc is self.error:  # the server's error, already the consumer's
                return
            self._queue.put_nowait(exc)
            await self._abandon()

    # -- audio out ----------------------------------------------------------------------------------------------

    def __aiter__(self) -> AsyncIterator[AudioChunk]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[AudioChunk]:
        while True:
            item = await self._queue.get()
            if isinstance(item, _End | BaseException):
                self._queue.put_nowait(item)  # so that iterating again ends (or raises) again
                if isinstance(item, _End):
                    return
                raise item
            if self._stopped:  # cancelled meanwhile: nothing more of this turn
                return
            yield item

    async def audio(self) -> np.ndarray:
        """Every chunk until the turn ends, concatenated (int16)."""
        parts = [chunk.pcm async for chunk in self]
        return np.concatenate(parts) if parts else np.zeros(0, np.int16)

    @property
    def words(self) -> list[Word]:
        """The turn's words so far, each with when it is heard (sessions connected with `timestamps="word"`)."""
        return self._words.words

    def timestamps(self) -> AsyncIterator[Word]:
        """Its words as they arrive, each before the audio it describes; ends with the turn."""
        return self._words.follow()

    # -- cancel -------------------------------------------------------------------------------------------------

    async def cancel(self, played_pts: int | None = None) -> None:
        """Barge-in: stop the turn. When this returns the server has acknowledged it, and iterating the turn yields
        no chunk of it any more (chunks still queued are dropped). `played_pts`: where your player stopped.
        A turn whose audio the server had all sent when the cancel reached it ends as done instead (`done` set,
        `cancelled` None): its last chunks were already on the way, and they are dropped the same."""
        if self.done is not None or self.cancelled is not None:
            return
        self._stopped = True
        self._pending.clear()
        for task in (self._timer, self._feeder):
            if task is not None and task is not asyncio.current_task():
                task.cancel()
        if self._opened and self.error is None:
            message: dict[str, Any] = {"type": "context.cancel", "context_id": self.context_id}
            if played_pts is not None:
                message["played_pts"] = played_pts
            async with self._lock:
                self._cancel_sent = True
                await self._conn.client.send(message)
            await self._conn.wait_for(self._conn.client.context(self.context_id).done, self)
        self._drop_queued()

    async def _abandon(self) -> None:
        """Cancel after a failure, keeping the failure as what the consumer sees."""
        try:
            await self.cancel()
        except SessionError:
            pass

    def _drop_queued(self) -> None:
        while not self._queue.empty():
            self._queue.get_nowait()
        self._queue.put_nowait(_End())

    # -- what the connection routes here ------------------------------------------------------------------------

    def _on_chunk(self, chunk: AudioChunk) -> None:
        if not self._stopped:
            self._queue.put_nowait(chunk)

    def _on_message(self, msg: dict[str, Any]) -> None:
        kind = msg["type"]
        if kind == "timestamps":
            self._words.add(msg, self._start_pts, self._conn.sample_rate)
        elif kind == "context.started":
            self._start_pts = msg["start_pts"]
        elif kind == "context.done":
            self.done = msg
            self._queue.put_nowait(_End())
            self._words.end()
        elif kind == "context.cancelled":
            self.cancelled = msg
            self._queue.put_nowait(_End())
            self._words.end()
        elif kind == "flushed":
            self.flushed[msg["flush_id"]] = msg["end_pts"]
            if msg["flush_id"] in self._flush_events:
                self._flush_events[msg["flush_id"]].set()
        elif kind == "stall":
            report = StallReport(msg["pts"], msg["duration_ms"], msg["cause"], msg.get("events", 1), msg["track"],
                                 msg.get("loop_held_ms"))
            self.stalls.append(report)
            if self._on_stall is not None:
                self._on_stall(report)
        elif kind == "warning":
            self.warnings.append(msg)
        elif kind == "error":
            if self._cancel_sent and msg["code"] == "unknown_context":
                # The cancel crossed the context's end: the server had sent all of its audio, and its context.done
                # (behind that audio; the error jumped the queue) ends the wait. Not the consumer's error.
                return
            self._fail(VoxgateError.from_message(msg))

    def _fail(self, error: VoxgateError) -> None:
        """An error for this turn: the consumer gets it; text stops, and a context the server may still speak
        (a rejected context.open whose text.append raced it opens one with the defaults) is cancelled."""
        if self.error is not None or self.done is not None or self.cancelled is not None:
            return
        self.error = error
        self._stopped = True
        self._pending.clear()
        for task in (self._timer, self._feeder):
            if task is not None:
                task.cancel()
        self._queue.put_nowait(error)
        self._words.end()
        self._conn.client.context(self.context_id).done.set()  # wake whoever waits on the turn
        if self._opened:
            self._conn.send_soon({"type": "context.cancel", "context_id": self.context_id})

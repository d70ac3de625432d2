"""One writer task per socket: the only code that sends. Two queues: ordered (frames and the context events that
must follow them; bounded, so a slow reader slows only its own session) and urgent (cancel acks, errors, pongs).

Per frame it does O(1) work: a counter instead of counting the queue, and the 24-byte header packed once, at
write time, from the frame's fields and the connection's `seq`.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from voxgate.gateway.protocol import HEADER


@dataclass(slots=True)
class OutFrame:
    owner: Any  # the Context; its `cancelled` flag is checked at enqueue and at write time
    codec: int
    flags: int
    ctx: int
    track: int
    samples: int
    pts: int
    payload: bytes


JsonItem = dict[str, Any] | Callable[[], dict[str, Any] | None]  # a callable is evaluated at write time


@dataclass(slots=True)
class OutEvent:
    owner: Any  # the Context the event belongs to (withdrawn with its frames on cancel), or None
    item: JsonItem


class SocketWriter:
    def __init__(self, send_bytes: Callable[[bytes], Awaitable[None]], send_text: Callable[[str], Awaitable[None]],
                 max_frames: int, on_frame_written: Callable[[OutFrame, float], None],
                 send_now: Callable[[bytes | str], bool] | None = None) -> None:
        self._send_bytes = send_bytes
        self._send_text = send_text
        self._send_now = send_now  # writes at once if the socket takes it without waiting (ws_protocol.py)
        self._max = max_frames
        self._ordered: deque[OutFrame | OutEvent] = deque()
        self._urgent: deque[JsonItem | OutFrame] = deque()
        self._ready = asyncio.Event()
        self._space = asyncio.Event()
        self._on_frame_written = on_frame_written
        self._seq = 0
        self._frames = 0  # OutFrames in `_ordered`
        self._sending_since: float | None = None  # a send to the socket is in progress since then
        self.closed = False

    async def put_frame(self, frame: OutFrame) -> bool:
        """Queue a frame; waits while the queue is full. False if its context was cancelled meanwhile."""
        while self._frames >= self._max and not self.closed:
            self._space.clear()
            await self._space.wait()
        if frame.owner.cancelled or self.closed:
            return False
        self._ordered.append(frame)
        self._frames += 1
        self._ready.set()
        return True

    def put_event(self, item: JsonItem, owner: Any = None) -> None:
        """An event ordered after everything queued before it (context.started, flushed, context.done)."""
        self._ordered.append(OutEvent(owner, item))
        self._ready.set()

    def put_urgent(self, item: JsonItem | OutFrame) -> None:
        """Ahead of everything ordered: cancel acks, errors, pongs, and a cancelled context's empty LAST frame
        (which must precede its ack, after every frame of it that was written)."""
        self._urgent.append(item)
        self._ready.set()

    def withdraw(self, owner: Any) -> tuple[int, bool]:
        """Remove the queued frames and events of a cancelled context.

        Returns the withdrawn frames' samples, and whether its `context.started` was among them (then the
        client never learned that the context started).
        """
        kept: deque[OutFrame | OutEvent] = deque()
        samples = 0
        started_withdrawn = False
        for item in self._ordered:
            if item.owner is not owner:
                kept.append(item)
            elif isinstance(item, OutFrame):
                samples += item.samples
                self._frames -= 1
            elif isinstance(item.item, dict) and item.item.get("type") == "context.started":
                started_withdrawn = True
        self._ordered = kept
        self._space.set()
        return samples, started_withdrawn

    @property
    def urgent_backlog(self) -> int:
        return len(self._urgent)

    @property
    def queued_frames(self) -> int:
        return self._frames

    def stalled_for(self, now: float) -> float:
        """How long the socket has not taken the message being sent (0 when idle): a peer that stopped reading."""
        return 0.0 if self._sending_since is None else now - self._sending_since

    async def run(self) -> None:
        while True:
            if not self._urgent and not self._ordered:
                self._ready.clear()
                await self._ready.wait()
                continue
            if self._urgent:
                item = self._urgent.popleft()
                if isinstance(item, OutFrame):
                    await self._write_frame(item)
                    continue
            else:
                item = self._ordered.popleft()
                if isinstance(item, OutFrame):
                    self._frames -= 1
                    self._space.set()
                    if not item.owner.cancelled:
                        await self._write_frame(item)
                    continue
                item = item.item
            message = item() if callable(item) else item
            if message is not None:
                text = json.dumps(message, separators=(",", ":"))
                if self._send_now is None or not self._send_now(text):
                    self._sending_since = time.monotonic()
                    await self._send_text(text)
                    self._sending_since = None

    async def _write_frame(self, item: OutFrame) -> None:
        data = HEADER.pack(1, item.codec, item.flags, item.ctx, self._seq, item.track, item.samples,
                           item.pts) + item.payload
        self._seq = (self._seq + 1) & 0xFFFFFFFF
        written_at = time.monotonic()
        if self._send_now is None or not self._send_now(data):
            self._sending_since = written_at
            await self._send_bytes(data)
            self._sending_since = None
        self._on_frame_written(item, written_at)

    def close(self) -> None:
        self.closed = True
        self._space.set()

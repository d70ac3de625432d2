"""One writer task per socket: the only code that sends. Two queues: ordered (frames and the context events that
must follow them; bounded, so a slow reader slows only its own session) and urgent (cancel acks, errors, pongs).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from .protocol import FrameHeader


@dataclass(slots=True)
class OutFrame:
    owner: Any  # the Context; its `cancelled` flag is checked at enqueue time
    header: FrameHeader  # seq is assigned when written
    payload: bytes


JsonItem = dict[str, Any] | Callable[[], dict[str, Any] | None]  # a callable is evaluated at write time


@dataclass(slots=True)
class OutEvent:
    owner: Any  # the Context the event belongs to (withdrawn with its frames on cancel), or None
    item: JsonItem


class SocketWriter:
    def __init__(self, send_bytes: Callable[[bytes], Awaitable[None]], send_text: Callable[[str], Awaitable[None]],
                 max_frames: int, on_frame_written: Callable[[OutFrame, float], None]) -> None:
        self._send_bytes = send_bytes
        self._send_text = send_text
        self._max = max_frames
        self._ordered: deque[OutFrame | OutEvent] = deque()
        self._urgent: deque[JsonItem] = deque()
        self._ready = asyncio.Event()
        self._space = asyncio.Event()
        self._on_frame_written = on_frame_written
        self._seq = 0
        self.closed = False

    async def put_frame(self, frame: OutFrame) -> bool:
        """Queue a frame; waits while the queue is full. False if its context was cancelled meanwhile."""
        while self.queued_frames >= self._max and not self.closed:
            self._space.clear()
            await self._space.wait()
        if frame.owner.cancelled or self.closed:
            return False
        self._ordered.append(frame)
        self._ready.set()
        return True

    def put_event(self, item: JsonItem, owner: Any = None) -> None:
        """An event ordered after everything queued before it (context.started, flushed, context.done)."""
        self._ordered.append(OutEvent(owner, item))
        self._ready.set()

    def put_urgent(self, item: JsonItem) -> None:
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
                samples += item.header.samples
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
        return sum(isinstance(i, OutFrame) for i in self._ordered)

    async def run(self) -> None:
        while True:
            if not self._urgent and not self._ordered:
                self._ready.clear()
                await self._ready.wait()
                continue
            item = self._urgent.popleft() if self._urgent else self._ordered.popleft()
            self._space.set()
            if isinstance(item, OutFrame):
                if item.owner.cancelled:
                    continue
                header = item.header
                header = FrameHeader(header.codec, header.flags, header.ctx, self._seq, header.track, header.samples,
                                     header.pts)
                self._seq = (self._seq + 1) & 0xFFFFFFFF
                data = header.pack() + item.payload
                written_at = time.monotonic()
                await self._send_bytes(data)
                self._on_frame_written(item, written_at)
                continue
            if isinstance(item, OutEvent):
                item = item.item
            message = item() if callable(item) else item
            if message is not None:
                await self._send_text(json.dumps(message, separators=(",", ":")))

    def close(self) -> None:
        self.closed = True
        self._space.set()

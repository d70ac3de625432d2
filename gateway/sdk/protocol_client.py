"""A Python client of the voxgate WebSocket protocol: what `voxgate say` and the tests use.

`VoxgateClient` owns one session. A receive task decodes every frame (Opus through libopus, mu-law, PCM), feeds
a `SimulatedPlayer` on the real clock, and (in `client_clock` mode) sends playback reports at the announced
interval. Results per context: the decoded audio, the raw frames, the events, and the client-side timings.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import struct
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import websockets
from voxgate.gateway.audio.frames import mulaw_decode
from voxgate.gateway.protocol import FLAG_CODEC_RESET, FLAG_PACKETS, PROTOCOL, FrameHeader
from websockets.typing import Subprotocol

from .message_pacer import MessagePacer
from .player import SimulatedPlayer


@dataclass
class ContextResult:
    context_id: str
    frames: list[tuple[FrameHeader, bytes, float]] = field(default_factory=list)  # header, payload, arrival
    pcm: list[np.ndarray] = field(default_factory=list)  # decoded, at the session rate
    events: list[dict[str, Any]] = field(default_factory=list)
    sent_at: float | None = None  # when the text that made it speakable was sent
    done: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def audio(self) -> np.ndarray:
        return np.concatenate(self.pcm) if self.pcm else np.zeros(0, np.int16)

    @property
    def first_audio_ms(self) -> float | None:
        if not self.frames or self.sent_at is None:
            return None
        return (self.frames[0][2] - self.sent_at) * 1000

    @property
    def words(self) -> list[dict[str, Any]]:
        """Its words with their times, from its `timestamps` events (a session started with timestamps "word")."""
        return [word for e in self.events if e["type"] == "timestamps" for word in e["words"]]

    def event(self, kind: str) -> dict[str, Any] | None:
        return next((e for e in self.events if e["type"] == kind), None)


class SessionError(Exception):
    """The server refused the session, or closed it: the message is the server's own error when it sent one."""


class VoxgateClient:
    def __init__(self, url: str, *, codec: str = "pcm_s16le", sample_rate: int | None = None,
                 pacing: str = "client_clock", target_buffer_ms: int = 150, max_buffer_ms: int = 1000,
                 voice: str | None = None, language: str | None = None, report: bool = True,
                 token: str | None = None, frame_ms: int | None = None) -> None:
        self.url = url
        self.start_msg: dict[str, Any] = {
            "type": "session.start", "protocol": PROTOCOL,
            "audio": {"codec": codec, **({"sample_rate": sample_rate} if sample_rate else {}),
                      **({"frame_ms": frame_ms} if frame_ms else {})},
            "pacing": {"mode": pacing, "target_buffer_ms": target_buffer_ms, "max_buffer_ms": max_buffer_ms},
            "defaults": {k: v for k, v in (("voice", voice), ("language", language)) if v},
        }
        self.report = report and pacing == "client_clock"
        self.token = token
        self.ws: Any = None
        self.session: dict[str, Any] = {}
        self.contexts: dict[str, ContextResult] = {}
        self.by_handle: dict[int, ContextResult] = {}
        self.messages: list[dict[str, Any]] = []  # every JSON message, in arrival order
        self.errors: list[dict[str, Any]] = []
        self.player = SimulatedPlayer(24_000, 0)  # replaced once session.started gives the rate and target
        # every message after session.start keeps within the session's limits.max_messages_per_s (message_pacer.py)
        self.pacer = MessagePacer(None)
        self.max_buffered_reported = 0
        self._decoder: Any = None
        self._skip = 0
        self._tasks: list[asyncio.Task] = []
        self._started = asyncio.Event()
        self.closed = asyncio.Event()
        self.close_code: int | None = None
        self.start_timeout_s = 10.0

    async def __aenter__(self) -> VoxgateClient:
        subprotocols = [Subprotocol(PROTOCOL)] + ([Subprotocol(f"voxgate.token.{self.token}")] if self.token else [])
        self.ws = await websockets.connect(self.url, subprotocols=subprotocols, max_size=None, compression=None)
        self._tasks.append(asyncio.get_running_loop().create_task(self._receive()))
        try:
            await self.send(self.start_msg)
        except SessionError:  # refused before it read anything (a wrong token): its error is on the receive task
            pass
        try:
            async with asyncio.timeout(self.start_timeout_s):
                await self._started.wait()
        except TimeoutError:
            await self.__aexit__()
            raise SessionError(f"no session.started within {self.start_timeout_s:g} s") from None
        if not self.session:  # an error came instead, or the server closed
            # A fatal refusal is followed by the server's close: wait for it (briefly), so its code is known. A
            # refusal that keeps the session open (a bad voice) is not waited on: nothing else would come but,
            # later, an idle timeout of its own.
            if self.errors and self.errors[-1].get("fatal"):
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(2.0):
                        await self.closed.wait()
            await self.__aexit__()
            raise SessionError(self._why_closed("the server refused the session"))
        self.pacer = MessagePacer((self.session.get("limits") or {}).get("max_messages_per_s"))
        audio = self.session["audio"]
        self.rate = audio["sample_rate"]
        preroll = int(self.session["pacing"]["target_buffer_ms"] * self.rate / 1000)
        self.player = SimulatedPlayer(self.rate, preroll)
        if self.report:
            self._tasks.append(asyncio.get_running_loop().create_task(self._report_loop()))
        return self

    async def __aexit__(self, *exc: object) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.ws.close()

    async def send(self, message: dict[str, Any]) -> None:
        """Send one message, waiting first where the session's message limit asks (MessagePacer)."""
        await self.pacer.take()
        try:
            await self.ws.send(json.dumps(message))
        except websockets.ConnectionClosed:
            raise SessionError(self._why_closed("the server closed the session")) from None

    def _why_closed(self, what: str) -> str:
        """`what`, with the server's last error and the close code when there are."""
        error = self.errors[-1] if self.errors else None
        detail = f": {error['code']}: {error['message']}" if error else ""
        code = f" (close {self.close_code})" if self.close_code is not None else ""
        return f"{what}{detail}{code}"

    async def _until_done(self, result: ContextResult) -> None:
        """Wait for the context's done or cancelled; a closed session is an error (not a wait without end)."""
        done = asyncio.ensure_future(result.done.wait())
        closed = asyncio.ensure_future(self.closed.wait())
        try:
            await asyncio.wait([done, closed], return_when=asyncio.FIRST_COMPLETED)
        finally:
            done.cancel()
            closed.cancel()
        if not result.done.is_set():
            raise SessionError(self._why_closed("the server closed the session"))

    def context(self, context_id: str) -> ContextResult:
        if context_id not in self.contexts:
            self.contexts[context_id] = ContextResult(context_id)
        return self.contexts[context_id]

    async def speak(self, context_id: str, text: str, *, words_per_message: int | None = None,
                    delay_s: float = 0.0, **open_fields: Any) -> ContextResult:
        """Open a context, stream the text (all at once, or a few words a message), end it, wait for done."""
        result = self.context(context_id)
        await self.send({"type": "context.open", "context_id": context_id, **open_fields})
        if words_per_message:
            words = text.split(" ")
            for i in range(0, len(words), words_per_message):
                piece = " ".join(words[i : i + words_per_message]) + (" " if i + words_per_message < len(words) else "")
                if result.sent_at is None:
                    result.sent_at = time.monotonic()
                await self.send({"type": "text.append", "context_id": context_id, "text": piece})
                if delay_s:
                    await asyncio.sleep(delay_s)
        else:
            await self.send({"type": "text.append", "context_id": context_id, "text": text})
        result.sent_at = result.sent_at or time.monotonic()
        await self.send({"type": "context.end", "context_id": context_id})
        await self._until_done(result)
        return result

    async def _report_loop(self) -> None:
        interval = self.session["pacing"]["feedback_interval_ms"] / 1000
        while True:
            await asyncio.sleep(interval)
            report = self.player.report()
            self.max_buffered_reported = max(self.max_buffered_reported, report["buffered_samples"])
            await self.send(report)

    async def _receive(self) -> None:
        try:
            async for raw in self.ws:
                now = time.monotonic()
                if isinstance(raw, bytes):
                    self._on_frame(raw, now)
                else:
                    self._on_message(json.loads(raw))
        except websockets.ConnectionClosed as exc:
            self.close_code = exc.rcvd.code if exc.rcvd else None
        finally:
            if self.close_code is None and self.ws.close_code is not None:
                self.close_code = self.ws.close_code
            self.closed.set()
            self._started.set()

    def _on_message(self, msg: dict[str, Any]) -> None:
        self.messages.append(msg)
        kind = msg["type"]
        if kind == "session.started":
            self.session = msg
            self._started.set()
            return
        if kind in ("error", "warning"):
            self.errors.append(msg)
            if not self.session and kind == "error":  # refused at session.start: say so now, not after a timeout
                self._started.set()
        context_id = msg.get("context_id")
        if context_id is None:
            return
        result = self.context(context_id)
        result.events.append(msg)
        if kind == "context.started":
            self.by_handle[msg["ctx"]] = result
        elif kind == "flushed":
            self.player.on_boundary(msg["end_pts"])
        elif kind in ("context.done", "context.cancelled"):
            result.done.set()

    def _on_frame(self, data: bytes, now: float) -> None:
        header = FrameHeader.unpack(data)
        payload = data[24:]
        result = self.by_handle.get(header.ctx)
        if result is None:
            raise AssertionError(f"frame of ctx {header.ctx} before its context.started")
        result.frames.append((header, payload, now))
        result.pcm.append(self._decode(header, payload))
        self.player.on_frame(header.pts, header.samples, header.flags, now)

    def _decode(self, header: FrameHeader, payload: bytes) -> np.ndarray:
        if not header.samples:  # an empty frame (a LAST with no audio left): nothing to decode
            return np.zeros(0, np.int16)
        if header.codec == 0:
            return np.frombuffer(payload, "<i2").astype(np.int16)
        if header.codec == 3:
            return mulaw_decode(payload)
        import opuslib

        if header.flags & FLAG_CODEC_RESET or self._decoder is None:
            self._decoder = opuslib.Decoder(48_000, 1)
            self._skip = self.session["audio"]["pre_skip"]
        audio = self.session["audio"]
        frame_size = 48 * audio.get("packet_ms", audio["frame_ms"])
        packets = split_packets(payload) if header.flags & FLAG_PACKETS else [payload]
        pcm = np.concatenate([np.frombuffer(self._decoder.decode(p, frame_size), np.int16) for p in packets])
        if self._skip:
            pcm, self._skip = pcm[self._skip :], max(0, self._skip - len(pcm))
        return pcm


def split_packets(payload: bytes) -> list[bytes]:
    """The Opus packets of a long frame (FLAG_PACKETS): each after its u16 little-endian length."""
    packets, at = [], 0
    while at < len(payload):
        (length,) = struct.unpack_from("<H", payload, at)
        packets.append(payload[at + 2 : at + 2 + length])
        at += 2 + length
    return packets

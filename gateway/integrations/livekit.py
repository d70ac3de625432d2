"""LiveKit Agents TTS speaking through a voxgate gateway (docs/integrations-livekit.md; extra `voxgate[livekit]`).

    from voxgate.integrations.livekit import TTS
    session = AgentSession(tts=TTS(url="ws://127.0.0.1:8000/v1/tts/ws", voice="en-us"), ...)

Each framework segment (text up to a `flush()`) is one voxgate context: text goes out as it is pushed
(`text.append`), the segment's end is `context.end` (which speaks what is buffered at once, as a flush does, and frees
the context), and `aclose()` or an interruption sends `context.cancel` and waits for the gateway's acknowledgement,
after which no frame of the context can come. Sessions are pooled: a stream borrows one WebSocket for its lifetime,
so an agent's turns after the first skip the handshake. With `word_timestamps=True` the TTS gives aligned transcripts:
each word as a `TimedString` (seconds from its segment's first audio) ahead of the audio that holds it.
"""

from __future__ import annotations

import asyncio
import os
import weakref
from dataclasses import dataclass, replace
from typing import Any

import websockets
from livekit.agents import APIConnectionError, APIConnectOptions, APIError, APIStatusError, APITimeoutError, tts, utils
from livekit.agents.types import DEFAULT_API_CONNECT_OPTIONS, TimedString
from voxgate.client import Connection, Turn, VoxgateError, connect
from voxgate.client.protocol_client import SessionError

DEFAULT_URL = "ws://127.0.0.1:8000/v1/tts/ws"
SAMPLE_RATE = 24000  # the engine's own rate: no resampling on the gateway
FRAME_MS = 200  # asap frames carry what is ready up to this, so a larger one costs no latency, only fewer messages
CANCEL_ACK_TIMEOUT_S = 2.0  # past this the session is dropped instead of reused: its state is unknown

# The protocol's codes as the HTTP statuses its HTTP API uses for them. APIStatusError makes 4xx (but 408 and 429)
# not retryable, so the framework retries only what another try can fix; an unknown code counts as a 500.
STATUS_BY_CODE = {
    "invalid_message": 400, "unsupported": 400, "protocol_violation": 400, "unknown_context": 400,
    "unauthorized": 401, "voice_not_found": 404, "message_too_large": 413, "text_too_long": 413,
    "idle_timeout": 408, "session_expired": 408, "slow_consumer": 408,
    "rate_limited": 429, "context_limit": 429, "too_many_sessions": 429, "shutting_down": 503,
}


@dataclass(frozen=True, slots=True)
class _Options:
    voice: str | None = None
    language: str | None = None
    instruct: str | None = None

    def context_fields(self) -> dict[str, Any]:
        """Sent with each `context.open`, so that a pooled session serves any options."""
        return {k: v for k, v in (("voice", self.voice), ("language", self.language),
                                  ("instruct", self.instruct)) if v is not None}


def api_error(exc: BaseException, url: str) -> APIError:
    """The framework's error for a failure of the gateway or of the way to it: one line, the server's code first."""
    if isinstance(exc, APIError):
        return exc
    if isinstance(exc, VoxgateError) and exc.code != "closed":
        return APIStatusError(f"voxgate {exc.code}: {exc.message}", status_code=STATUS_BY_CODE.get(exc.code, 500),
                              body={"code": exc.code, "context_id": exc.context_id, "close_code": exc.close_code})
    if isinstance(exc, websockets.InvalidStatus):  # refused before the WebSocket opened (401, 403, 503, ...)
        status = exc.response.status_code
        return APIStatusError(f"voxgate refused the WebSocket at {url}: HTTP {status}", status_code=status)
    if isinstance(exc, TimeoutError):
        return APITimeoutError(f"voxgate at {url} did not answer in time")
    return APIConnectionError(f"voxgate at {url}: {type(exc).__name__}: {exc}")


class TTS(tts.TTS):
    """A streaming `livekit.agents.tts.TTS` on a voxgate gateway: PCM16 mono at `sample_rate` (24 kHz by default).

    `url` and `token` default to `$VOXGATE_URL` (else `DEFAULT_URL`) and `$VOXGATE_TOKEN`; `voice`, `language` and
    `instruct` are voxgate's context options (the gateway's defaults when None). `word_timestamps`: aligned
    transcripts from the gateway's word timestamps (its engine must measure them: espeak does, qwen3tts with a
    forced aligner); `word_timestamps_hold=False`: the gateway's audio does not wait for them (session.start
    `timestamps_hold`: first audio as without them, a word's time may follow its audio)."""

    def __init__(self, *, url: str | None = None, token: str | None = None, voice: str | None = None,
                 language: str | None = None, instruct: str | None = None, sample_rate: int = SAMPLE_RATE,
                 word_timestamps: bool = False, word_timestamps_hold: bool | None = None) -> None:
        super().__init__(capabilities=tts.TTSCapabilities(streaming=True, aligned_transcript=word_timestamps),
                         sample_rate=sample_rate, num_channels=1)
        self._url = url or os.environ.get("VOXGATE_URL") or DEFAULT_URL
        self._word_timestamps_hold = word_timestamps_hold
        self._token = token or os.environ.get("VOXGATE_TOKEN") or None
        self._opts = _Options(voice, language, instruct)
        self._pool = utils.ConnectionPool[Connection](connect_cb=self._connect, close_cb=self._disconnect)
        self._streams = weakref.WeakSet[SynthesizeStream]()

    @property
    def model(self) -> str:
        return "voxgate"

    @property
    def provider(self) -> str:
        return "voxgate"

    def update_options(self, *, voice: str | None = None, language: str | None = None,
                       instruct: str | None = None) -> None:
        """Options for the streams made from now on (each context carries them, so pooled sessions stay valid)."""
        changes = {k: v for k, v in (("voice", voice), ("language", language), ("instruct", instruct)) if v}
        self._opts = replace(self._opts, **changes)

    def synthesize(self, text: str, *,
                   conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS) -> tts.ChunkedStream:
        # The framework's own wrapper over stream(): the gateway has one path for text, whole or streamed.
        return self._synthesize_with_stream(text, conn_options=conn_options)

    def stream(self, *, conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS) -> SynthesizeStream:
        stream = SynthesizeStream(tts=self, conn_options=conn_options)
        self._streams.add(stream)
        return stream

    def prewarm(self) -> None:
        self._pool.prewarm()

    async def aclose(self) -> None:
        for stream in list(self._streams):
            await stream.aclose()
        self._streams.clear()
        await self._pool.aclose()

    async def _connect(self, timeout: float) -> Connection:
        conn = connect(self._url, token=self._token, sample_rate=self.sample_rate, frame_ms=FRAME_MS,
                       pacing="asap",  # the framework paces playout itself
                       timestamps="word" if self.capabilities.aligned_transcript else None,
                       timestamps_hold=self._word_timestamps_hold if self.capabilities.aligned_transcript else None)
        conn.client.start_timeout_s = timeout
        try:
            async with asyncio.timeout(timeout):
                await conn.__aenter__()
        except Exception as exc:
            if conn.client.ws is not None:
                await conn.client.__aexit__()
            raise api_error(exc, self._url) from exc
        return conn

    async def _disconnect(self, conn: Connection) -> None:
        await conn.__aexit__()

    async def _acquire(self, timeout: float) -> Connection:
        """A pooled session that is still open (the gateway closes idle ones after its `idle_timeout_s`)."""
        while True:
            conn = await self._pool.get(timeout=timeout)
            if not conn.client.closed.is_set():
                return conn
            self._pool.remove(conn)


class SynthesizeStream(tts.SynthesizeStream):
    """One framework stream on one borrowed gateway session; each segment is a voxgate context."""

    def __init__(self, *, tts: TTS, conn_options: APIConnectOptions) -> None:
        super().__init__(tts=tts, conn_options=conn_options)
        self._tts: TTS = tts
        self._opts = tts._opts

    async def _run(self, output_emitter: tts.AudioEmitter) -> None:
        output_emitter.initialize(request_id=utils.shortuuid(), sample_rate=self._tts.sample_rate, num_channels=1,
                                  mime_type="audio/pcm", stream=True)
        conn = await self._tts._acquire(self._conn_options.timeout)
        turns: list[Turn] = []
        segments: asyncio.Queue[Turn | None] = asyncio.Queue()  # in segment order, for the audio side

        async def send_text() -> None:
            turn: Turn | None = None
            async for item in self._input_ch:
                if isinstance(item, self._FlushSentinel):
                    if turn is not None:
                        await turn.end()
                        turn = None
                    continue
                if turn is None:
                    # context ids are the framework's segment ids: unique, and the gateway's logs show them
                    turn = conn.context(f"lk-{utils.shortuuid()}", **self._opts.context_fields())
                    turns.append(turn)
                    segments.put_nowait(turn)
                self._mark_started()
                await turn.send(item)
            if turn is not None:
                await turn.end()
            segments.put_nowait(None)

        async def receive_audio() -> None:
            while (turn := await segments.get()) is not None:
                output_emitter.start_segment(segment_id=turn.context_id)
                told = 0  # words handed over: each goes with the next audio pushed, the one that holds it
                async for chunk in turn:
                    told = _push_words(output_emitter, turn, told)
                    output_emitter.push(chunk.pcm.tobytes())
                _push_words(output_emitter, turn, told)
                output_emitter.end_segment()

        tasks = [asyncio.create_task(send_text()), asyncio.create_task(receive_audio())]
        failure: BaseException | None = None
        try:
            await asyncio.gather(*tasks)
        except (VoxgateError, SessionError, OSError, websockets.WebSocketException) as exc:
            failure = exc
            raise api_error(exc, self._tts._url) from exc
        finally:
            await utils.aio.gracefully_cancel(*tasks)
            # After an interruption (aclose) or a failure, turns may be live: nothing more of them may be spoken.
            acknowledged = await self._cancel(turns)
            turn_failed = isinstance(failure, VoxgateError) and failure.context_id is not None  # the session is fine
            if acknowledged and (failure is None or turn_failed):
                self._tts._pool.put(conn)
            else:
                self._tts._pool.remove(conn)

    async def _cancel(self, turns: list[Turn]) -> bool:
        """`context.cancel` for every live turn, waiting for each acknowledgement; whether the session is reusable."""
        try:
            async with asyncio.timeout(CANCEL_ACK_TIMEOUT_S):
                for turn in turns:
                    await turn.cancel()
        except (TimeoutError, SessionError):
            return False
        return True


def _push_words(output_emitter: tts.AudioEmitter, turn: Turn, told: int) -> int:
    """The turn's words since `told` as aligned transcript (each with its space, as the framework joins them)."""
    words = turn.words[told:]
    for w in words:
        output_emitter.push_timed_transcript(TimedString(w.word + " ", start_time=w.start_ms / 1000,
                                                         end_time=w.end_ms / 1000))
    return told + len(words)

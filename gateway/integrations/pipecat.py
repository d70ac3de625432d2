"""A Pipecat TTS service that speaks through a voxgate gateway (docs/integrations.md); needs `voxgate[pipecat]`.

One gateway session per service, on the Python SDK (`voxgate.client`); one voxgate context per Pipecat turn (the
Pipecat context id is the voxgate `context_id`): its text goes out as `text.append` while the LLM streams, and
`context.end` closes it when the turn ends. An interruption cancels the turn on the gateway (`context.cancel`) and
drops whatever of it is still in flight. Audio comes back as `pcm_s16le` at the pipeline's output rate, in
`asap` pacing: Pipecat's output transport paces playback itself. With `word_timestamps=True` the turn's
`TTSTextFrame`s come from the gateway's word timestamps, each timed to its word's audio (Pipecat builds the
assistant's context from the words that were played).

    tts = VoxgateTTSService(url="ws://127.0.0.1:8000/v1/tts/ws", voice="en-us")
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import soxr
from loguru import logger
from pipecat.frames.frames import (
    AggregatedTextFrame,
    Frame,
    InterruptionFrame,
    StartFrame,
    TTSAudioRawFrame,
    TTSStoppedFrame,
    TTSTextFrame,
)
from pipecat.processors.frame_processor import FrameDirection
from pipecat.services.settings import TTSSettings
from pipecat.services.tts_service import TextAggregationMode, WebsocketTTSService
from pipecat.transcriptions.language import Language
from pipecat.utils.context.word_timestamp_tracker import WordTimestamp
from pipecat.utils.errors import ErrorCategory
from pipecat.utils.types import NOT_GIVEN, NotGiven
from voxgate.client import Connection, Turn, VoxgateError, connect
from voxgate.client.protocol_client import SessionError
from voxgate.gateway.protocol import PCM_RATES
from websockets.exceptions import WebSocketException

# What the gateway's error codes (docs/protocol.md#errors-and-limits) mean to Pipecat. A permanent category
# (authentication, invalid request) makes Pipecat stop giving the service work: the same settings would fail again.
ERROR_CATEGORIES = {
    "unauthorized": ErrorCategory.AUTHENTICATION,
    "voice_not_found": ErrorCategory.INVALID_REQUEST,
    "unsupported": ErrorCategory.INVALID_REQUEST,
    "rate_limited": ErrorCategory.RATE_LIMIT,
    "context_limit": ErrorCategory.RATE_LIMIT,
    "too_many_sessions": ErrorCategory.RATE_LIMIT,
    "synthesis_failed": ErrorCategory.SERVER,
    "internal_error": ErrorCategory.SERVER,
    "shutting_down": ErrorCategory.SERVER,
    "closed": ErrorCategory.CONNECTIVITY,
}

RECONNECT_WAIT_S = 2.0  # how long a turn waits for the session that replaces one the gateway ended


@dataclass
class _TurnWords:
    """A turn's word timestamps on their way to Pipecat. Of streamed tokens Pipecat makes a sentence (which its
    words are matched against) only when the next sentence starts or the turn ends, but the gateway times words as
    it speaks them, sooner. A word Pipecat plays before it has the word's sentence is set aside and comes out behind
    the words queued after it, so each word waits here for its sentence."""

    text: str = ""  # the turn's text so far, as run_tts got it
    sentences: str = ""  # the sentences Pipecat has made of it, as it announced them
    floor: int = 0  # words of `text` before the token that confirmed the last of them
    whole: bool = False  # Pipecat has all of the text's sentences (its end, or no streamed tokens)
    told: int = 0  # the gateway's words handed to Pipecat
    told_text_words: int = 0  # the words of `text` they cover ("on the" is two)

    def placeable(self) -> int | None:
        """How many words of `text` Pipecat has sentences for (None: all). Its sentences read as the text does,
        unless a text transform changed it: then count up to the last confirming token."""
        if self.whole:
            return None
        made, sent = self.sentences.split(), self.text.split()
        return len(made) if sent[: len(made)] == made else self.floor


@dataclass
class VoxgateTTSSettings(TTSSettings):
    """Pipecat's TTS settings plus voxgate's `instruct` (a style or voice description, for engines that take one).

    `voice`, `language` and `instruct` apply per turn: a `TTSUpdateSettingsFrame` takes effect at the next one.
    """

    instruct: str | NotGiven | None = field(default_factory=lambda: NOT_GIVEN)


class VoxgateTTSService(WebsocketTTSService):
    """Pipecat TTS on a voxgate gateway: streamed text in, `TTSAudioRawFrame`s out, interruptions as cancels."""

    Settings = VoxgateTTSSettings
    _settings: VoxgateTTSSettings

    def __init__(self, *, url: str, voice: str | None = None, language: Language | str | None = None,
                 instruct: str | None = None, token: str | None = None, sample_rate: int | None = None,
                 settings: VoxgateTTSSettings | None = None,
                 text_aggregation_mode: TextAggregationMode = TextAggregationMode.TOKEN,
                 word_timestamps: bool = False, word_timestamps_hold: bool | None = None, **kwargs: Any) -> None:
        """`url`: the gateway's `ws://.../v1/tts/ws`; `voice`, `language`, `instruct`: per-turn options (None: the
        gateway's defaults); `token`: for a gateway with `auth_tokens`; `sample_rate`: None for the pipeline's
        output rate. Tokens stream to the gateway as they come by default (`TextAggregationMode.TOKEN`): the gateway
        cuts sentences itself, so waiting for Pipecat's sentence aggregation would only add latency.
        `word_timestamps`: time each word's `TTSTextFrame` by the gateway's word timestamps (the gateway's engine
        must measure them: espeak does, qwen3tts with a forced aligner; without them Pipecat sends each turn's text
        at its end) instead of pushing the text as it is sent; with streamed tokens a word goes to Pipecat once
        Pipecat has its sentence, so the frames keep their order. `word_timestamps_hold=False`: the gateway's audio
        does not wait for them (session.start `timestamps_hold`: first audio as without them; a word's time may
        follow its audio; its frame keeps the word's pts)."""
        store = self.Settings(model=None, voice=voice, language=language, instruct=instruct)
        if settings is not None:
            store.apply_update(settings)
        super().__init__(text_aggregation_mode=text_aggregation_mode, push_text_frames=not word_timestamps,
                         push_start_frame=True, sample_rate=sample_rate, settings=store, **kwargs)
        self._url = url
        self._token = token
        self._word_timestamps = word_timestamps
        self._word_timestamps_hold = word_timestamps_hold
        self._connection: Connection | None = None
        self._receive_task: asyncio.Task | None = None
        self._turns: dict[str, Turn] = {}  # live voxgate contexts, by Pipecat context id
        self._readers: dict[str, asyncio.Task] = {}  # the task moving each turn's audio into its audio context
        self._unspoken: set[str] = set()  # turns that could not be opened, until they end
        self._words: dict[str, _TurnWords] = {}  # with word_timestamps: each live turn's words for Pipecat
        self._words_lock = asyncio.Lock()  # the reader and run_tts both hand words over: one at a time, in order

    @property
    def connection(self) -> Connection | None:
        """The gateway session (`voxgate.client.Connection`), while connected."""
        return self._connection

    def can_generate_metrics(self) -> bool:
        return True

    def language_to_service_language(self, language: Language) -> str | None:
        """The primary subtag (`en-US` -> `en`): what every voxgate engine takes."""
        return str(language.value).split("-")[0].lower()

    # -- lifecycle ----------------------------------------------------------------------------------------------

    async def start(self, frame: StartFrame) -> None:
        await super().start(frame)
        await self._connect()

    async def _connect(self) -> None:
        await super()._connect()
        await self._connect_websocket()
        if self._connection is not None and (self._receive_task is None or self._receive_task.done()):
            self._receive_task = self.create_task(self._receive_task_handler(self._report_error))

    async def _disconnect(self) -> None:
        await super()._disconnect()
        for task in (*self._readers.values(), *([self._receive_task] if self._receive_task else [])):
            await self.cancel_task(task)
        self._readers.clear()
        self._turns.clear()
        self._words.clear()
        self._receive_task = None
        await self._disconnect_websocket()

    async def _connect_websocket(self) -> None:
        if self._connection is not None and not self._connection.client.closed.is_set():
            return
        connection = connect(self._url, codec="pcm_s16le", sample_rate=self._gateway_rate(), pacing="asap",
                             token=self._token, timestamps="word" if self._word_timestamps else None,
                             timestamps_hold=self._word_timestamps_hold if self._word_timestamps else None)
        try:
            await connection.__aenter__()
        except (SessionError, OSError, TimeoutError, WebSocketException) as error:  # refused, unreachable, HTTP 4xx
            await self._push_gateway_error(error)
            await self._call_event_handler("on_connection_error", str(error))
            return
        self._connection = connection
        self._websocket = connection.client.ws  # what the base class pings to verify a reconnection
        if self._word_timestamps and connection.session.get("timestamps") != "word":
            logger.warning(f"{self} the gateway gives no word timestamps: "
                           f"{connection.session.get('timestamps_unavailable', 'an older gateway')}")
        idle_timeout_s = connection.session["limits"].get("idle_timeout_s") or 0
        if idle_timeout_s > 0:  # the gateway closes a session idle for that long; a bot waits for its user
            self._create_keepalive_task(idle_timeout_s / 3)
        await self._call_event_handler("on_connected")

    async def _disconnect_websocket(self) -> None:
        await self._cancel_keepalive_task()
        connection, self._connection, self._websocket = self._connection, None, None
        if connection is not None:
            await connection.__aexit__()
            await self._call_event_handler("on_disconnected")

    async def _receive_messages(self) -> None:
        """The SDK reads the socket; this only waits for the session to end, so the base class can reconnect."""
        assert self._connection is not None
        await self._connection.client.closed.wait()
        raise ConnectionError(str(self._connection.client.closed_error()))

    async def _send_keepalive(self) -> None:
        if self._connection is not None:
            await self._connection.client.send({"type": "ping"})

    def _gateway_rate(self) -> int:
        """The rate to ask the gateway for: the pipeline's, or the next higher one it offers (then resampled here)."""
        return next((rate for rate in PCM_RATES if rate >= self.sample_rate), PCM_RATES[-1])

    # -- a turn: text in, audio out -----------------------------------------------------------------------------

    async def run_tts(self, text: str, context_id: str) -> AsyncGenerator[Frame | None, None]:
        """Append `text` to the turn's voxgate context (opened with the first text); the audio arrives on the
        turn's reader task. `yield None`: this service's audio never comes inline."""
        turn = self._turns.get(context_id)
        if turn is None and context_id not in self._unspoken:
            turn = await self._open_turn(context_id)
            if turn is None:  # no session, or the turn failed already: the rest of its text goes unspoken too
                self._unspoken.add(context_id)
        if turn is not None:
            words = self._words.get(context_id)
            if words is not None:  # Pipecat has made the sentences this text confirms: their words may go
                words.text += text
                await self._add_words(turn, context_id)
            try:
                await turn.send(text)
            except (VoxgateError, RuntimeError) as error:  # the turn failed (its reader reports it) or ended
                logger.debug(f"{self} text for context {context_id} not sent: {error}")
            if not self._is_streaming_tokens:  # token mode counts the whole turn's text at its end
                await self.start_tts_usage_metrics(text)
        yield None

    async def _open_turn(self, context_id: str) -> Turn | None:
        connection = await self._open_session()
        if connection is None:
            logger.warning(f"{self} no gateway session, not speaking context {context_id}")
            return None
        # Pipecat has moved on to a new turn: an older one it never ended (a reply cut off before its end, such as
        # tokens that trailed an interruption) gets no more text, yet on the gateway it would hold the track ahead of
        # this one, waiting for a sentence end that never comes. It speaks what it has and ends.
        for older in list(self._turns.values()):
            await self._end_turn(older)
        options = {name: getattr(self._settings, name) for name in ("voice", "language", "instruct")}
        try:
            turn = connection.context(context_id, **options)
        except ValueError:  # the id's turn already ended on this session (a failed turn's later text)
            return None
        self._turns[context_id] = turn
        if self._word_timestamps:
            self._words[context_id] = _TurnWords(whole=not self._is_streaming_tokens)
        self._readers[context_id] = self.create_task(self._read_audio(turn, context_id), name=f"voxgate_{context_id}")
        return turn

    async def _open_session(self) -> Connection | None:
        """The open session. Connects if there is none (a failed start); a session the gateway just ended
        (`max_session_s`, a restart) is being replaced by the receive task: wait a moment for it, rather than race
        it with a second one."""
        if self._receive_task is None or self._receive_task.done():
            await self._connect()
        deadline = asyncio.get_running_loop().time() + RECONNECT_WAIT_S
        while self._connection is None or self._connection.client.closed.is_set():
            if self._receive_task is None or self._receive_task.done():
                return None  # not connected: that error was reported
            if asyncio.get_running_loop().time() > deadline:
                return None
            await asyncio.sleep(0.05)
        return self._connection

    async def _read_audio(self, turn: Turn, context_id: str) -> None:
        """Move the turn's audio into its Pipecat audio context, in order, until `context.done` or an error."""
        assert self._connection is not None
        source_rate = self._connection.sample_rate
        # One stream per turn, flushed at its end, so that no sample of the turn's tail stays inside soxr.
        resampler = (soxr.ResampleStream(source_rate, self.sample_rate, 1, dtype="int16")
                     if source_rate != self.sample_rate else None)
        try:
            async for chunk in turn:
                await self._add_words(turn, context_id)  # each word before the audio that holds it, if it may go
                pcm = chunk.pcm if resampler is None else resampler.resample_chunk(chunk.pcm)
                await self._append_audio(context_id, pcm)
            if context_id in self._words:  # the rest, before the turn's end (Pipecat completes what it can't place)
                self._words[context_id].whole = True
            await self._add_words(turn, context_id)
            if resampler is not None:
                await self._append_audio(context_id, resampler.resample_chunk(np.zeros(0, np.int16), last=True))
        except VoxgateError as error:
            await self._push_gateway_error(error)
        finally:
            self._readers.pop(context_id, None)
            self._turns.pop(context_id, None)
            self._words.pop(context_id, None)
        await self.append_to_audio_context(context_id, TTSStoppedFrame(context_id=context_id))
        await self.remove_audio_context(context_id)

    async def _add_words(self, turn: Turn, context_id: str) -> None:
        """The turn's words not yet told whose sentence Pipecat has, into its audio context (seconds from its first
        audio, as Pipecat times them)."""
        state = self._words.get(context_id)
        if state is None:
            return
        async with self._words_lock:
            limit, batch = state.placeable(), []
            for word in turn.words[state.told:]:
                covers = len(word.word.split())
                if limit is not None and state.told_text_words + covers > limit:
                    break
                batch.append(word)
                state.told += 1
                state.told_text_words += covers
            if batch:
                await self.add_word_timestamps([(w.word, w.start_ms / 1000) for w in batch], context_id)

    async def append_to_audio_context(self, context_id: str | None, frame: Frame | WordTimestamp | None) -> None:
        await super().append_to_audio_context(context_id, frame)
        state = self._words.get(context_id or "")
        # Each sentence Pipecat makes of streamed tokens is announced here (`will_be_spoken`, RTVI's new segment),
        # before run_tts gets the token that confirmed it.
        if (state is not None and isinstance(frame, AggregatedTextFrame) and not isinstance(frame, TTSTextFrame)
                and frame.will_be_spoken):
            state.sentences += " " + frame.text  # split() later: no two sentences' words run together
            state.floor = len(state.text.split())

    async def _append_audio(self, context_id: str, pcm: np.ndarray) -> None:
        if len(pcm):
            frame = TTSAudioRawFrame(pcm.tobytes(), self.sample_rate, 1, context_id=context_id)
            await self.append_to_audio_context(context_id, frame)

    async def flush_audio(self, context_id: str | None = None) -> None:
        """The end of the turn: `context.end` (the gateway speaks the rest, then answers `context.done`)."""
        context_id = context_id or self.get_active_audio_context_id() or ""
        turn = self._turns.get(context_id)
        if turn is not None:
            if context_id in self._words:  # Pipecat has made the turn's last sentence
                self._words[context_id].whole = True
                await self._add_words(turn, context_id)
            await self._end_turn(turn)
        elif self.audio_context_available(context_id):  # a turn with nothing to speak ends now, not on a timeout
            await self.append_to_audio_context(context_id, TTSStoppedFrame(context_id=context_id))
            await self.remove_audio_context(context_id)
        self._unspoken.discard(context_id)

    async def _end_turn(self, turn: Turn) -> None:
        try:
            await turn.end()  # once: a turn already ended sends nothing
        except SessionError as error:  # the session closed: the reader reports it
            logger.debug(f"{self} context.end not sent: {error}")

    # -- interruptions ------------------------------------------------------------------------------------------

    async def on_audio_context_interrupted(self, context_id: str) -> None:
        await self._cancel_turn(context_id)
        await super().on_audio_context_interrupted(context_id)

    async def _handle_interruption(self, frame: InterruptionFrame, direction: FrameDirection) -> None:
        await super()._handle_interruption(frame, direction)
        self._unspoken.clear()
        # A turn whose audio context Pipecat already closed (no audio for stop_frame_timeout_s) gets no hook above,
        # yet the gateway would go on speaking it ahead of the next turn on the track.
        for context_id in list(self._turns):
            if context_id not in self.get_audio_contexts():
                await self._cancel_turn(context_id)

    async def _cancel_turn(self, context_id: str) -> None:
        """Stop the turn's audio here at once; the gateway's acknowledgement is awaited in the background, so the
        interruption is not held up by a round trip."""
        turn = self._turns.pop(context_id, None)
        reader = self._readers.pop(context_id, None)
        self._words.pop(context_id, None)
        if reader is not None:
            await self.cancel_task(reader)
        if turn is not None:
            self.create_task(self._cancel_on_gateway(turn), name=f"voxgate_cancel_{context_id}")

    async def _cancel_on_gateway(self, turn: Turn) -> None:
        try:
            await turn.cancel()
        except SessionError as error:  # the session closed meanwhile: nothing is left to cancel
            logger.debug(f"{self} context.cancel of {turn.context_id} not acknowledged: {error}")

    # -- errors -------------------------------------------------------------------------------------------------

    async def _push_gateway_error(self, error: Exception) -> None:
        """One `ErrorFrame` upstream, its text led by the gateway's code (`voice_not_found: ...`); the exception,
        a `VoxgateError` with `.code`, travels with it. Other failures (unreachable, an HTTP refusal) are left to
        Pipecat's own classification (a 401 is an authentication error, a refused connection a connectivity one)."""
        code = getattr(error, "code", None)
        category = ERROR_CATEGORIES.get(code, ErrorCategory.UNKNOWN) if code else None
        context = f" (context {error.context_id})" if getattr(error, "context_id", None) else ""
        # Without its traceback, Pipecat's log line is the server's code and message, not the SDK's file and line.
        await self.push_error(f"voxgate {error}{context}", exception=error.with_traceback(None), category=category)

"""One `POST /v1/audio/speech` job, spoken: PCM from the engine, encoded as it arrives, sent as raw bytes, as
OpenAI's `speech.audio.*` Server-Sent Events (with voxgate's `speech.audio.timestamps` when asked), or whole (with
word times asked, as JSON: the file in base64 beside its words).

The first PCM piece is awaited before the response starts, so an engine that refuses the request (an unknown
language, a text too long for a stream) answers with a status and a JSON error instead of an empty 200. Encoders
that cost CPU (mp3, opus, aac, flac) run on a small thread pool (`speech_encoder_threads`); PyAV releases the GIL
while it encodes, so other sessions' event-loop work goes on meanwhile.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import struct
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from starlette.responses import JSONResponse, Response, StreamingResponse
from voxgate.engine.base import SAMPLE_RATE
from voxgate.gateway.audio.containers import FORMATS, ReadyEncoders, SpeechEncoder, make_speech_encoder
from voxgate.gateway.session.pcm_producer import synthesize_pcm
from voxgate.gateway.session.state import GatewayState
from voxgate.gateway.session.words import WordMark
from voxgate.gateway.transport.log_filters import AlreadyLogged

from .errors import ENGINE_ERROR_STATUS
from .speech_request import SpeechJob

log = logging.getLogger("voxgate.http")
T = TypeVar("T")

# The request field an engine's refusal is about (where one is): OpenAI's `param`. Other codes name no one field.
_PARAM = {"voice_not_found": "voice", "language_not_supported": "language", "text_too_long": "input"}
_pools: dict[int, ThreadPoolExecutor] = {}
_ready = ReadyEncoders()  # process-wide: one encoder per container format made ahead
FIRST_BYTES = SAMPLE_RATE // 10 * 2  # 100 ms of PCM16: past every encoder's first packet (aac needs ~2160 samples)


def _pool(threads: int) -> ThreadPoolExecutor | None:
    if threads <= 0:
        return None
    if threads not in _pools:
        _pools[threads] = ThreadPoolExecutor(threads, thread_name_prefix="voxgate-speech-enc")
    return _pools[threads]


def _sse(event: dict[str, Any]) -> bytes:
    return f"event: {event['type']}\ndata: {json.dumps(event, separators=(',', ':'))}\n\n".encode()


async def speak(state: GatewayState, job: SpeechJob, t_request: float,
                admitted: Callable[[], None] | None = None) -> Response:
    """`admitted`: called once the engine has the stream, or it ended without reaching it (Admission.admit)."""
    metrics, errors = state.metrics, []
    words: list[WordMark] = []  # word times not yet sent (job.word_times): each goes out before its audio's delta
    pool = _pool(state.config.speech_encoder_threads)
    loop = asyncio.get_running_loop()

    async def off_loop(encoder: SpeechEncoder | None, fn: Callable[..., T], *args: Any) -> T:
        if pool is not None and (encoder is None or encoder.slow):
            return await loop.run_in_executor(pool, fn, *args)
        return fn(*args)

    by_sentence = job.word_times and state.engine.word_times_by_sentence  # timed per sentence: a short first one
    first_clause = state.config.word_times_first_clause_words if by_sentence else 0
    context, pcm = synthesize_pcm(state.engine, job.text, job.voice, job.language, job.instruct, job.budget_samples,
                                  errors, state.turns, job.stream_text, admitted, t_request,
                                  words.append if job.word_times else None, first_clause, job.word_times_hold)
    state.drain.http_streams += 1  # a shutdown lets it finish within the grace
    # The encoder: the one made ahead, else made (codec opened, header written) while the engine makes the first
    # audio. The next one is made ahead off the loop once this one's first bytes are out: made earlier, it would
    # compete with them for the CPU and the GIL.
    ready = _ready.take(job.format) if FORMATS[job.format].muxer else None
    making = asyncio.ensure_future(off_loop(None, make_speech_encoder, job.format)) \
        if FORMATS[job.format].muxer and ready is None else None
    refilled = False

    def refill() -> None:
        nonlocal refilled
        if refilled or not FORMATS[job.format].muxer:
            return
        refilled = True
        if pool is not None:
            loop.run_in_executor(pool, _ready.refill, job.format)
        else:
            loop.call_soon(_ready.refill, job.format)

    try:
        first = await anext(pcm, None)
        if first is not None:
            metrics.first_audio.labels("http").observe(time.monotonic() - t_request)
        encoder = ready or (await making if making is not None else make_speech_encoder(job.format))
    except BaseException:
        refill()
        state.drain.http_streams -= 1
        await pcm.aclose()
        if making is not None:
            making.cancel()
        if ready is not None:
            ready.close()
        raise
    if first is None and errors:
        refill()
        state.drain.http_streams -= 1
        await pcm.aclose()
        encoder.close()
        for error in errors:
            metrics.errors.labels(error.partition(":")[0]).inc()
        code = errors[0].partition(":")[0]
        status = ENGINE_ERROR_STATUS.get(code, 500)
        kind = "invalid_request_error" if status < 500 else "server_error"
        return JSONResponse({"error": {"message": "; ".join(errors), "type": kind, "code": code,
                                       "param": _PARAM.get(code)}}, status_code=status)

    async def encoded() -> AsyncIterator[bytes]:
        """Container bytes; ends without the encoder's tail when the engine failed midway."""
        try:
            head = encoder.start()
            if head:
                yield head
            if first is not None:
                # The first piece may be long (what the engine made before the producer ran): its first 100 ms
                # are encoded alone, so the encoder's first packets leave without waiting for the whole piece.
                # Until the encoder's first packet, pieces of up to 100 ms are encoded right here: a hop through
                # the encoder pool cost more than the encoding (first byte vs PCM, n = 25: mp3 +7.3 -> +4.4 ms,
                # opus +3.9 -> +2.2, aac +6.0 -> +3.3, flac +6.0 -> +3.8), at ~1-2.5 ms of the loop once a request.
                started = False

                async def encode(part: bytes) -> bytes:
                    nonlocal started
                    inline = not started and len(part) <= FIRST_BYTES
                    out = encoder.encode(part) if inline else await off_loop(encoder, encoder.encode, part)
                    if out and not started:
                        started = True
                        loop.call_soon(refill)  # after these bytes are written
                    return out

                for part in (first[:FIRST_BYTES], first[FIRST_BYTES:]):
                    if part:
                        yield await encode(part)
                async for data in pcm:
                    metrics.audio_seconds.labels("http").inc(len(data) / 2 / SAMPLE_RATE)
                    out = await encode(data)
                    if out:
                        yield out
            if not errors:
                yield await off_loop(encoder, encoder.finish)
        finally:
            refill()  # a request that ended before its first bytes
            encoder.close()
            await pcm.aclose()
            state.drain.http_streams -= 1
            for error in errors:
                metrics.errors.labels(error.partition(":")[0]).inc()

    def first_written() -> None:  # the first body bytes are sent: the first-audio timeline is complete
        if context.timeline is not None:
            context.timeline.stamp("write")
            metrics.observe_first_audio("http", context.timeline)

    headers = {"X-Sample-Rate": str(SAMPLE_RATE), "X-Channels": "1", "Cache-Control": "no-store"}
    media = FORMATS[job.format].media_type
    if first is not None:
        metrics.audio_seconds.labels("http").inc(len(first) / 2 / SAMPLE_RATE)
    if job.mode == "audio":
        return StreamingResponse(_cut_on_engine_error(_counted(encoded(), metrics, first_written), errors),
                                 media_type=media, headers=headers)
    if job.mode == "sse":
        return StreamingResponse(_counted(_events(encoded(), encoder, job, errors, words), metrics, first_written),
                                 media_type="text/event-stream", headers=headers)
    data = b"".join([piece async for piece in _counted(encoded(), metrics)])
    if errors:  # what could be spoken, and why the rest is missing
        headers["X-Synthesis-Errors"] = "; ".join(errors)[:1000].encode("ascii", "replace").decode()
    if job.format == "wav":  # a complete file: real sizes
        data = data[:4] + struct.pack("<I", len(data) - 8) + data[8:40] + struct.pack("<I", len(data) - 44) + data[44:]
    if job.word_times:  # the file and its words in one JSON answer (words measured after the audio included)
        return JSONResponse(_whole_with_words(data, job, media, encoder.samples, words, errors), headers=headers)
    return Response(data, media_type=media, headers=headers)


def _whole_with_words(data: bytes, job: SpeechJob, media: str, samples: int, words: list[WordMark],
                      errors: list[str]) -> dict[str, Any]:
    """A whole answer with word times (`stream: false`, `timestamps: "word"`): the audio file in base64, its
    format, and every word with its start and end in ms on the audio's timeline, as the SSE events carry them."""
    answer: dict[str, Any] = {
        "audio": base64.b64encode(data).decode(), "response_format": job.format, "content_type": media,
        "sample_rate": SAMPLE_RATE, "duration_ms": round(samples * 1000 / SAMPLE_RATE, 1),
        "timestamps": [word for mark in words for word in mark.words], "usage": job.usage(samples),
    }
    if errors:  # what could be spoken, and why the rest is missing (as the header says of a file)
        answer["error"] = _midway_error(errors)
    return answer


def _midway_error(errors: list[str]) -> dict[str, Any]:
    """OpenAI's error object for an engine that failed after audio went out (SSE's `speech.audio.error`, a whole
    JSON answer's `error`): the first error's code names it."""
    code = errors[0].partition(":")[0]
    return {"message": "; ".join(errors), "type": "server_error", "code": code, "param": _PARAM.get(code)}


async def _counted(pieces: AsyncIterator[bytes], metrics: Any,
                   on_first: Callable[[], None] | None = None) -> AsyncIterator[bytes]:
    """The pieces, counted; `on_first` once the first one is sent (the server asks for the next only then)."""
    async for piece in pieces:
        if piece:
            metrics.bytes_out.labels("http").inc(len(piece))
            yield piece
            if on_first is not None:
                on_first()
                on_first = None


async def _events(pieces: AsyncIterator[bytes], encoder: SpeechEncoder, job: SpeechJob,
                  errors: list[str], words: list[WordMark]) -> AsyncIterator[bytes]:
    """OpenAI's speech stream events: `speech.audio.delta` (base64 of the next container bytes), then
    `speech.audio.done` with usage; `speech.audio.error` (vLLM-Omni's) instead of done when the engine failed.

    `words` fills as the PCM is read, each mark before the PCM holding its words' start goes to the encoder, so
    sending what it holds before each delta puts every `speech.audio.timestamps` event before the bytes of its audio
    (an encoder's lookahead only makes it earlier)."""
    async for piece in pieces:
        if piece:
            for mark in words:
                yield _sse({"type": "speech.audio.timestamps", "words": mark.words})
            words.clear()
            yield _sse({"type": "speech.audio.delta", "audio": base64.b64encode(piece).decode()})
    for mark in words:  # measured after the last audio (timestamps_hold false)
        yield _sse({"type": "speech.audio.timestamps", "words": mark.words})
    words.clear()
    if errors:
        log.warning("speech stream incomplete: %s", "; ".join(errors))
        yield _sse({"type": "speech.audio.error", "error": _midway_error(errors)})
    else:
        yield _sse({"type": "speech.audio.done", "usage": job.usage(encoder.samples)})


async def _cut_on_engine_error(pieces: AsyncIterator[bytes], errors: list[str]) -> AsyncIterator[bytes]:
    """A stream whose engine failed on a segment is cut after the rest (no final chunk): no client takes it for
    complete."""
    async for piece in pieces:
        yield piece
    if errors:
        log.warning("speech stream incomplete: %s", "; ".join(errors))
        raise AlreadyLogged("; ".join(errors))

"""Speech outside any session (HTTP speech, the speech WebSocket): a context spoken as PCM16 24 kHz by the same
producer as a WebSocket context, its frames read out as they are made."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

from voxgate.engine.base import SAMPLE_RATE, Engine
from voxgate.gateway.audio.frames import AudioFormat, make_encoder
from voxgate.gateway.transport.loop_turns import LoopTurns

from .context import MAX_AHEAD_S, Context, ReadyFrame
from .context_text import ContextText
from .text_split import TextSegmenter
from .words import WordMark


def pcm_context(voice: str | None, language: str | None, instruct: str | None, budget_samples: int,
                turns: LoopTurns | None = None, stream_text: bool = False,
                admitted: Callable[[], None] | None = None) -> Context:
    """A context outside any session, spoken as PCM16 24 kHz in long frames (HTTP speech, the speech WebSocket):
    its text goes in with `append_text` / `end`, its audio comes out of `spoken_pcm`. `stream_text` (engines with
    supports_text_streaming): the text goes into one engine stream, as a streamed WebSocket turn's. `admitted`:
    called once its first engine stream opens or it ends without one (Admission.admit)."""
    fmt = AudioFormat(frame_ms=1280)  # long frames: nothing held back
    context = Context("http", 0, 0, voice, language, instruct, budget_samples, True, make_encoder(fmt))
    context.release_admission = admitted
    context.max_ahead_samples = int(MAX_AHEAD_S * SAMPLE_RATE)
    context.turns = turns
    if stream_text:
        # Text and its end come together (HTTP), so the feed's rate rule never applies: one stream takes it all.
        context.feed = ContextText(min_words=1, min_wps=0.0)
    return context


async def spoken_pcm(context: Context, engine: Engine, errors: list[str],
                     on_words: Callable[[WordMark], None] | None = None) -> AsyncIterator[bytes]:
    """A `pcm_context`'s audio as PCM16 byte chunks, what the engine made, while its text may still arrive; it
    ends after `end()`. Engine errors are appended to `errors`; the rest is spoken. `on_words` (a context with
    `word_times`): given each word mark before the chunk that holds the start of its words' audio is yielded."""
    wake = asyncio.Event()
    producer = asyncio.get_running_loop().create_task(
        context.produce(engine, wake.set, lambda _kind, code, message: errors.append(f"{code}: {message}")))
    try:
        while True:
            if context.frames:
                item = context.pop()
                if isinstance(item, ReadyFrame) and item.frame.samples:
                    yield item.frame.payload
                elif isinstance(item, WordMark) and on_words is not None:
                    on_words(item)
            elif context.produced_all or producer.done():
                break
            else:
                wake.clear()
                await wake.wait()
    finally:
        producer.cancel()  # also on client disconnect: the engine stream is cancelled at once
        await asyncio.gather(producer, return_exceptions=True)
        if context.release_admission is not None:
            context.release_admission()  # (idempotent: its first stream released it, if it had one)


def synthesize_pcm(engine: Engine, text: str, voice: str | None, language: str | None, instruct: str | None,
                   budget_samples: int, errors: list[str], turns: LoopTurns | None = None,
                   stream_text: bool = False, admitted: Callable[[], None] | None = None,
                   received_at: float | None = None, on_words: Callable[[WordMark], None] | None = None,
                   first_clause_words: int = 0, hold_words: bool = True) -> tuple[Context, AsyncIterator[bytes]]:
    """One utterance as PCM16 24 kHz byte chunks, through the same producer as a WebSocket context (HTTP speech),
    and its context (whose `timeline` tells the way to its first audio, from `received_at` when given).

    Chunks are what the engine made (long frames). Engine errors are appended to `errors`; the rest is spoken.
    `on_words`: the engine's word times are asked for and given to it, each mark before its audio (spoken_pcm).
    `first_clause_words`: the first segment ends at a clause (TextSegmenter; config word_times_first_clause_words).
    `hold_words` False: no audio waits for its word times (SynthesisRequest.word_times_hold)."""
    context = pcm_context(voice, language, instruct, budget_samples, turns, stream_text, admitted)
    context.word_times = on_words is not None
    context.word_times_hold = hold_words
    context.segmenter = TextSegmenter(first_clause_words=first_clause_words)
    context.append_text(text)
    context.end()
    if received_at is not None:  # the request's text was speakable from its arrival on
        context.speakable_at = received_at
    return context, spoken_pcm(context, engine, errors, on_words)

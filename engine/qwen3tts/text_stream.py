"""A stream whose text arrives while it speaks (issue 18): the streaming-text layout of design §4-5, where the
prompt holds the first text token and every decode step adds the next one, so the Talker starts after a few tokens
and takes the rest as they come, with the codes it would make had all the text been there.

Text is tokenized as it comes (text_feed.py: only ids that cannot change are committed). The stream joins the
engine loop once `min_tokens` ids are committed (or the text ended); until then it holds no slot. Afterwards each
append extends the request's trailing ids, and `Request.frames_ready` keeps the stream out of steps whose text id
has not arrived (it waits; it never adds tts_pad early). `end_text` adds tts_eos and lifts the limit: tts_pad
follows, as for any stream. The frame budget grows with the text.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from typing import Any, Protocol

import numpy as np

from ..base import AudioStream, EngineError, SynthesisRequest
from ..loop import EngineLoop, LoopStream
from .text_feed import END_IDS, ROLE_IDS, TextFeed


class StreamHost(Protocol):
    """What a streamed text needs of its engine (Qwen3TTSEngine, which imports this module)."""

    tts: Any
    loop: EngineLoop | None
    joining: int  # streams made that have not joined the loop yet (admission counts them ahead of a new one)

    def prompt_inputs(self, request: SynthesisRequest, non_streaming: bool | None = None) -> Any: ...

    def prompt_rows(self, inputs: Any) -> Any: ...

    def frame_budget(self, request: SynthesisRequest, prompt_tokens: int, text: str | None = None) -> int: ...

    def check_trailing(self, count: int) -> None: ...

    def submit(self, request: SynthesisRequest, rows: Any, budget: int) -> LoopStream: ...


class StreamedText(AudioStream):
    def __init__(self, engine: StreamHost, request: SynthesisRequest, min_tokens: int) -> None:
        self.request = request
        self._engine = engine
        self._min_tokens = min_tokens
        # Validates voice, language and instruct now: a bad request fails at open, as a whole-text one does.
        inputs = engine.prompt_inputs(dataclasses.replace(request, text=request.text or "."), non_streaming=False)
        self._inputs = inputs
        # In-context clone prompts interleave the whole text with the reference frames: they wait for the end.
        self._whole_text_first = inputs.ref_codes is not None
        ids = inputs.text_ids
        self._role, self._end = ids[:ROLE_IDS], ids[-END_IDS:]
        self._eos = engine.tts.cfg.tts_eos_token_id
        self._feed = TextFeed(engine.tts.tokenizer, request.text)
        # The prompt's length holds from the first text id on (the streaming-text layout adds text as trailing
        # ids), so the room left can be told before the stream joins.
        self._prompt_tokens = len(engine.prompt_rows(inputs))
        self._inner: LoopStream | None = None
        self._joined = asyncio.Event()  # the inner stream exists, or there will be none (cancelled, empty text)
        self._cancelled = False
        engine.joining += 1
        try:
            self._join_if_ready()
        except BaseException:
            self._set_joined()
            raise

    # -- text -------------------------------------------------------------------------------------------------------
    def append_text(self, text: str) -> None:
        if self._feed.ended:
            raise EngineError("text_closed", "this stream's text has ended")
        self._check(self._feed.text + text)  # before anything changes: a refused append leaves the stream as it was
        new = self._feed.append(text)
        if self._inner is None:
            self._join_if_ready()
        elif new:
            self._extend(new, ended=False)

    def end_text(self) -> None:
        if self._feed.ended:
            return
        rest = self._feed.end()
        if self._inner is None:
            self._join_if_ready()
        else:
            self._extend([*rest, self._eos], ended=True)

    def can_append_text(self, text: str) -> bool:
        if self._feed.ended:
            return False
        try:
            self._check(self._feed.text + text)
        except EngineError:
            return False
        return True

    def _check(self, text: str) -> None:
        """text_too_long unless a stream whose whole text is `text` fits: its ids and tts_eos within
        `max_trailing` (one id too many: the first sits in the prompt) and its expected frames within the slot's
        positions after the prompt."""
        ids = self._feed.content_ids(text)
        self._engine.check_trailing(len(ids) + 1)
        prompt_tokens = self._prompt_tokens
        if self._whole_text_first:  # the prompt holds the whole text
            prompt_tokens = len(self._engine.prompt_rows(
                dataclasses.replace(self._inputs, text_ids=[*self._role, *ids, *self._end])))
        self._engine.frame_budget(self.request, prompt_tokens, text)

    def _extend(self, ids: list[int], ended: bool) -> None:
        request = self._inner.engine_request  # type: ignore[union-attr]
        trailing = request.prompt.trailing
        self._engine.check_trailing(len(trailing) + len(ids))
        request.frame_budget = max(request.frame_budget, self._budget(request.num_prompt_tokens))
        trailing.extend(ids)  # before the limit moves: the engine thread reads the ids the limit admits
        request.frames_ready = None if ended else len(trailing)
        self._engine.loop.wake()

    def _budget(self, prompt_tokens: int) -> int:
        return self._engine.frame_budget(self.request, prompt_tokens, self._feed.text)

    def _join_if_ready(self) -> None:
        """Join the engine loop once enough text is final (or all of it is there)."""
        if self._inner is not None or self._cancelled:
            return
        committed, ended = self._feed.committed, self._feed.ended
        if not ended and (self._whole_text_first or len(committed) < self._min_tokens):
            return
        if not committed:  # the whole text had nothing to say
            self._set_joined()
            return
        inputs = dataclasses.replace(self._inputs, text_ids=[*self._role, *committed, *self._end])
        rows = self._engine.prompt_rows(inputs)
        if not ended:
            rows.trailing.pop()  # tts_eos comes with the end of the text
        self._engine.check_trailing(len(rows.trailing))
        self._prompt_tokens = len(rows)
        self._inner = self._engine.submit(self.request, rows, self._budget(len(rows)))
        if not ended:
            self._inner.engine_request.frames_ready = len(rows.trailing)
        self._set_joined()

    def _set_joined(self) -> None:
        if not self._joined.is_set():
            self._joined.set()
            self._engine.joining -= 1

    # -- audio ------------------------------------------------------------------------------------------------------
    async def __aiter__(self) -> AsyncIterator[np.ndarray]:
        await self._joined.wait()
        if self._inner is None:
            return
        async for chunk in self._inner:
            yield chunk

    def cancel(self) -> None:
        self._cancelled = True
        if self._inner is not None:
            self._inner.cancel()
        self._set_joined()

    def report_playback(self, buffered_s: float) -> None:
        if self._inner is not None:
            self._inner.report_playback(buffered_s)

    def first_audio_stamps(self) -> dict[str, float]:
        return self._inner.first_audio_stamps() if self._inner is not None else {}

    @property
    def engine_request(self) -> Any:
        return self._inner.engine_request if self._inner is not None else None

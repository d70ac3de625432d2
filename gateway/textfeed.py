"""A context's text on its way into engine streams, for engines that take text while a stream is live.

One engine stream speaks the context's text as it arrives, from the first words to a flush or the end, instead of
one request per sentence: audio starts before the first sentence is complete and prosody carries across sentence
ends. An engine consumes text faster than it speaks it (Qwen3-TTS: about one token per 80 ms frame, ~10 words/s),
so a stream fed more slowly runs out of text and the listener hears a pause mid-sentence. The rule
(docs/protocol.md, "Text streaming"):

- a stream opens on an unfinished sentence only while the text arrives at `min_wps` or faster and at least
  `min_words` words are waiting; complete text (before a flush or the end) may always open one;
- a live stream takes text as it comes while the rate holds; once the rate drops it still takes the rest of the
  sentence it has begun, then its text ends at that sentence end;
- text the rule does not stream is spoken in sentence mode: one whole-text request per sentence, as for engines
  without text streaming.

Everything here runs on the event loop, synchronously: the session's handlers add text and cuts, the context's
producer takes requests (`next_request`) and reports what it opened (`opened`) and when a stream ended (`closed`).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from voxgate.engine.base import AudioStream, EngineError

from .textrate import TextRate
from .textsplit import TextSegmenter, count_words, ends_sentence, first_sentence

RECHECK_S = 0.1  # a live stream waiting at a sentence end: how often the decaying rate is looked at again


@dataclass(slots=True)
class Cut:
    flush_id: str | int | None  # None: the context's end


@dataclass(slots=True)
class OpenStream:
    text: str
    final: bool  # a cut follows: the stream's text ends with this


@dataclass(slots=True)
class Sentence:
    text: str


class TextFeed:
    def __init__(self, min_words: int, min_wps: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.min_words = min_words
        self.min_wps = min_wps
        self.clock = clock
        self.rate = TextRate()
        self.changed = asyncio.Event()  # set when the producer may have something new to take
        self.on_error: Callable[[EngineError], None] | None = None  # an engine refusing appended text
        self.last_event_at: float | None = None  # the latest text or cut: what made the next request speakable
        self.streams_opened = 0
        self.sentences_opened = 0
        self._items: deque[str | Cut] = deque()  # text not yet given to the engine, and the cuts among it, in order
        self._sentences: deque[str] = deque()  # text already cut for sentence mode, spoken before `_items`
        self._stream: AudioStream | None = None  # the live stream whose text is still open
        self._given_tail = ""  # the end of the text given to `_stream` (is it at a sentence end?)
        self._recheck: asyncio.TimerHandle | None = None

    @property
    def pending_chars(self) -> int:
        return sum(len(s) for s in self._sentences) + sum(len(i) for i in self._items if isinstance(i, str))

    # ---- in: the session's handlers -------------------------------------------------------------------------

    def add(self, text: str) -> None:
        now = self.clock()
        self.rate.add(text, now)
        self.last_event_at = now
        if self._items and isinstance(self._items[-1], str):
            self._items[-1] += text
        else:
            self._items.append(text)
        self._feed_live()
        self.changed.set()

    def cut(self, flush_id: str | int | None) -> None:
        self.last_event_at = self.clock()
        self._items.append(Cut(flush_id))
        self._feed_live()
        self.changed.set()

    def close(self) -> None:
        """The context is over (done or cancelled): no more timers, and no reference back to the context (`on_error`
        refers to it: a cycle only the collector could free)."""
        self.closed()
        self.on_error = None

    # ---- out: the producer ----------------------------------------------------------------------------------

    def next_request(self) -> OpenStream | Sentence | Cut | None:
        """What to open next, with no stream live: None while nothing may start yet."""
        if self._sentences:
            return Sentence(self._sentences.popleft())
        head, cut_next = self._head()
        if not head.strip():
            if head:
                self._items.popleft()  # whitespace alone says nothing
            if cut_next:
                cut = self._items.popleft()
                assert isinstance(cut, Cut)
                return cut
            return None
        if cut_next:
            self._items.popleft()
            return OpenStream(head, final=True)
        if count_words(head) >= self.min_words and self._flowing():
            self._items.popleft()
            return OpenStream(head, final=False)
        segments = TextSegmenter()
        complete = segments.append(head)
        if not complete:
            return None
        # Sentence mode for what is complete; the unfinished rest stays, for the rule to look at again.
        unfinished = head[len(head) - segments.buffered_chars:] if segments.buffered_chars else ""
        if unfinished:
            self._items[0] = unfinished
        else:
            self._items.popleft()
        self._sentences.extend(complete[1:])
        return Sentence(complete[0])

    def opened(self, stream: AudioStream, request: OpenStream) -> None:
        """The producer opened `stream` for `request`: it now takes the context's text while the rule allows."""
        self.streams_opened += 1
        if request.final:
            stream.end_text()
            return
        self._stream = stream
        self._given_tail = request.text[-32:]
        self._feed_live()

    def closed(self) -> None:
        """The producer's stream ended (spoken, failed or cancelled)."""
        self._stream = None
        if self._recheck is not None:
            self._recheck.cancel()
            self._recheck = None

    # ---- the rule, for the live stream ------------------------------------------------------------------------

    def _head(self) -> tuple[str, bool]:
        """The text before the first cut, and whether a cut follows it."""
        if not self._items:
            return "", False
        first = self._items[0]
        if isinstance(first, Cut):
            return "", True
        return first, len(self._items) > 1

    def _flowing(self) -> bool:
        return self.rate.wps(self.clock()) >= self.min_wps

    def _feed_live(self) -> None:
        stream = self._stream
        if stream is None:
            return
        while True:
            head, cut_next = self._head()
            if head:
                if not ends_sentence(self._given_tail, head):
                    part, rest = first_sentence(head)  # the sentence it began: spoken whatever the rate
                elif cut_next or self._flowing():
                    part, rest = head, ""
                else:
                    break  # the rate dropped at a sentence end: the rest goes by the rule, later
                if not self._give(stream, part, rest):
                    return
                if rest:
                    continue
                head, cut_next = "", len(self._items) > 0 and isinstance(self._items[0], Cut)
            if cut_next:
                self._end(stream)
                return
            break
        if ends_sentence(self._given_tail, self._head()[0]):
            if self._flowing():
                self._arm_recheck()
            else:
                self._end(stream)

    def _give(self, stream: AudioStream, part: str, rest: str) -> bool:
        try:
            stream.append_text(part)
        except EngineError as exc:
            self._stream = None
            if self.on_error is not None:
                self.on_error(exc)
            return False
        if rest:
            self._items[0] = rest
        else:
            self._items.popleft()
        self._given_tail = (self._given_tail + part)[-32:]
        return True

    def _end(self, stream: AudioStream) -> None:
        stream.end_text()
        self._stream = None
        self.changed.set()  # text the stream did not take may be waiting for the producer

    def _arm_recheck(self) -> None:
        if self._recheck is None:
            self._recheck = asyncio.get_running_loop().call_later(RECHECK_S, self._on_recheck)

    def _on_recheck(self) -> None:
        self._recheck = None
        self._feed_live()

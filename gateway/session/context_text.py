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

An engine stream holds a bounded text (qwen3tts: the KV positions of its slot), so a long turn rolls over: at a
sentence end, a live stream that could not take one more sentence as long as the next one so far, or the longest
one given yet, ends its text there, and the next text opens a fresh stream on the same timeline. Should a stream
still refuse text mid-sentence (`text_too_long`), its text so far ends and the rest goes on a fresh stream; a
sentence longer than a whole stream takes cannot go on: the stream is cancelled, the error reported once, and the
rest of the context's text dropped, now and as it comes (`failed`); its flushes and its end still reach the
producer, so the client is answered as usual.

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

from .text_rate import TextRate
from .text_split import TextSegmenter, count_words, ends_sentence, first_sentence

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


class ContextText:
    def __init__(self, min_words: int, min_wps: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.min_words = min_words
        self.min_wps = min_wps
        self.clock = clock
        self.rate = TextRate()
        self.changed = asyncio.Event()  # set when the producer may have something new to take
        self.on_error: Callable[[EngineError], None] | None = None  # an engine refusing appended text
        self.last_event_at: float | None = None  # the latest text or cut: what made the next request speakable
        self.streams_opened = 0
        self.rollovers = 0  # live streams whose text ended because they were full
        self.failed = False  # a sentence did not fit a whole stream: the context's text is dropped, cuts kept
        self.sentences_opened = 0
        self._items: deque[str | Cut] = deque()  # text not yet given to the engine, and the cuts among it, in order
        self._sentences: deque[str] = deque()  # text already cut for sentence mode, spoken before `_items`
        self._stream: AudioStream | None = None  # the live stream whose text is still open
        self._given_tail = ""  # the end of the text given to `_stream` (is it at a sentence end?)
        self._stream_sentence_ends = 0  # sentence ends `_stream` was given: 0 when a full one holds one sentence
        self._sentence = ""  # the sentence being given, so far
        self._longest = ""  # the longest sentence given to a stream yet: the room kept for the next one
        self._recheck: asyncio.TimerHandle | None = None
        # The limit's count (limits.max_buffered_text_chars), kept as text moves so an append checks it in O(1):
        # text in `_items` and `_sentences`, and text handed to the producer's request, counted until that request
        # ends (a live stream holds all its text till then, and speaks it after it was given).
        self._queued_chars = 0
        self._taken_chars = 0

    @property
    def unspoken_chars(self) -> int:
        """Text accepted and not yet spoken: waiting here, or in the engine request that has not ended."""
        return self._queued_chars + self._taken_chars

    # ---- in: the session's handlers -------------------------------------------------------------------------

    def add(self, text: str) -> None:
        if self.failed:
            return
        now = self.clock()
        self.rate.add(text, now)
        self.last_event_at = now
        self._queued_chars += len(text)
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
        if self.failed:  # only cuts are left
            cut = self._items.popleft() if self._items else None
            assert cut is None or isinstance(cut, Cut)
            return cut
        if self._sentences:
            return self._take(Sentence(self._sentences.popleft()))
        head, cut_next = self._head()
        if not head.strip():
            if head:
                self._items.popleft()  # whitespace alone says nothing
                self._queued_chars -= len(head)
            if cut_next:
                cut = self._items.popleft()
                assert isinstance(cut, Cut)
                return cut
            return None
        if cut_next:
            return self._take(self._open(head, final=True))
        if count_words(head) >= self.min_words and self._flowing():
            return self._take(self._open(head, final=False))
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
        # The sentences come stripped: the whitespace around them is never spoken, so it stops counting here.
        self._queued_chars -= len(head) - len(unfinished) - sum(map(len, complete))
        return self._take(Sentence(complete[0]))

    def _take(self, request: OpenStream | Sentence) -> OpenStream | Sentence:
        """`request` goes to the producer: its text is held there, and counts, until `closed`."""
        self._queued_chars -= len(request.text)
        self._taken_chars += len(request.text)
        return request

    def opened(self, stream: AudioStream, request: OpenStream) -> None:
        """The producer opened `stream` for `request`: it now takes the context's text while the rule allows."""
        self.streams_opened += 1
        if request.final:
            stream.end_text()
            return
        self._stream = stream
        self._given_tail = request.text[-32:]
        self._stream_sentence_ends = 0
        self._sentence += request.text
        self._feed_live()

    def closed(self) -> None:
        """The producer's request ended (spoken, failed or cancelled): its text is no longer held."""
        self._stream = None
        self._taken_chars = 0
        if self._recheck is not None:
            self._recheck.cancel()
            self._recheck = None

    # ---- the rule, for the live stream ------------------------------------------------------------------------

    def _open(self, head: str, final: bool) -> OpenStream:
        """A stream opens on the head's first sentence; the rest follows through `_feed_live`, which checks that
        each sentence fits (a head of many sentences may be longer than a whole stream)."""
        part, rest = first_sentence(head)
        if rest.strip():
            self._items[0] = rest
            return OpenStream(part, final=False)
        self._items.popleft()
        return OpenStream(head, final=final)

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
                at_end = ends_sentence(self._given_tail, head)
                if at_end and not (cut_next or self._flowing()):
                    break  # the rate dropped at a sentence end: the rest goes by the rule, later
                # Sentence by sentence: the one it began is spoken whatever the rate; each next one must fit.
                part, rest = first_sentence(head)
                if at_end and part.strip():  # (whitespace alone begins no sentence)
                    self._sentence_ended()
                    if not stream.can_append_text(max(part, self._longest, key=len)):
                        self.rollovers += 1
                        self._end(stream)  # full: the next sentence opens a fresh stream
                        return
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

    def _sentence_ended(self) -> None:
        self._stream_sentence_ends += 1
        if len(self._sentence) > len(self._longest):
            self._longest = self._sentence
        self._sentence = ""

    def _give(self, stream: AudioStream, part: str, rest: str) -> bool:
        try:
            stream.append_text(part)  # refused, it changes nothing (AudioStream.can_append_text)
        except EngineError as exc:
            if exc.code == "text_too_long" and self._stream_sentence_ends:
                self.rollovers += 1
                self._end(stream, mid_sentence=True)  # what it has is spoken, the rest opens a fresh stream
            else:
                self._fail(stream, exc)
            return False
        self._sentence += part
        self._queued_chars -= len(part)
        self._taken_chars += len(part)
        if rest:
            self._items[0] = rest
        else:
            self._items.popleft()
        self._given_tail = (self._given_tail + part)[-32:]
        return True

    def _end(self, stream: AudioStream, mid_sentence: bool = False) -> None:
        try:
            stream.end_text()
        except EngineError as exc:  # an engine that takes the text only whole may refuse it now
            self._fail(stream, exc)
            return
        self._stream = None
        if not mid_sentence:
            self._sentence_ended()
        self.changed.set()  # text the stream did not take may be waiting for the producer

    def _fail(self, stream: AudioStream, exc: EngineError) -> None:
        """The stream cannot go on (a sentence longer than a whole stream takes, or an engine refusing text): it is
        cancelled, freeing its engine slot now, and the error is reported once; the rest of the context's text is
        dropped, its cuts kept (a flush is still answered, the end still ends it)."""
        stream.cancel()
        self._stream = None
        self.failed = True
        self._items = deque(item for item in self._items if isinstance(item, Cut))
        self._sentences.clear()
        self._queued_chars = 0
        if exc.code == "text_too_long":
            exc = EngineError("text_too_long", f"a sentence is longer than one engine stream takes: {exc.message}; "
                              "the rest of this context's text is dropped")
        if self.on_error is not None:
            self.on_error(exc)
        self.changed.set()

    def _arm_recheck(self) -> None:
        if self._recheck is None:
            self._recheck = asyncio.get_running_loop().call_later(RECHECK_S, self._on_recheck)

    def _on_recheck(self) -> None:
        self._recheck = None
        self._feed_live()

"""The text-streaming rule (gateway/session/context_text.py) and its parts, on a hand-driven clock: no server."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from voxgate.engine.base import AudioStream, EngineError
from voxgate.gateway.session.context_text import ContextText, Cut, OpenStream, Sentence
from voxgate.gateway.session.text_rate import TextRate
from voxgate.gateway.session.text_split import count_words, ends_sentence, first_sentence


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class Stream(AudioStream):
    """Records the text it is given."""

    def __init__(self) -> None:
        self.appended: list[str] = []
        self.ended = False

    def __aiter__(self):  # pragma: no cover (never iterated here)
        raise NotImplementedError

    def cancel(self) -> None:
        pass

    def append_text(self, text: str) -> None:
        if self.ended:
            raise EngineError("text_closed", "ended")
        self.appended.append(text)

    def end_text(self) -> None:
        self.ended = True


def feed_words(feed: ContextText, clock: Clock, text: str, wps: float) -> None:
    for word in text.split(" "):
        feed.add(word + " ")
        clock.t += 1 / wps


def test_helpers():
    assert count_words("hello wor") == 2 and count_words("ld and more", after_space=False) == 2
    assert ends_sentence("Done. ") and ends_sentence("Done.") and not ends_sentence("Pi is 3.", "14")
    assert ends_sentence("Done.", " Next") and not ends_sentence("Not done ") and ends_sentence("line\n")
    assert first_sentence("One. Two three") == ("One.", " Two three")
    assert first_sentence("no end yet") == ("no end yet", "")


def test_rate_counts_words_across_pieces_and_decays_in_silence():
    rate = TextRate(window_s=1.0)
    rate.add("a burst of many words at once", 0.0)
    assert rate.wps(0.0) == 0 and rate.wps(0.5) == 0  # one message says nothing about what follows
    for i in range(1, 11):
        rate.add(" wo", i * 0.1)
        rate.add("rd", i * 0.1 + 0.01)  # the rest of the same word: not a new one
    assert rate.wps(1.01) == pytest.approx(10, rel=0.15)
    assert rate.wps(3.0) < 1  # silence: the rate decays without a new message


async def test_fast_text_opens_one_stream_after_min_words_and_feeds_it():
    clock = Clock()
    feed = ContextText(min_words=4, min_wps=10, clock=clock)
    feed.add("The birch ")
    clock.t += 0.05
    assert feed.next_request() is None  # two words
    feed_words(feed, clock, "canoe slid on", 20)
    request = feed.next_request()
    assert isinstance(request, OpenStream) and not request.final
    assert request.text == "The birch canoe slid on "
    stream = Stream()
    feed.opened(stream, request)
    feed_words(feed, clock, "the smooth planks. Glue the sheet", 20)
    assert "".join(stream.appended) == "the smooth planks. Glue the sheet "
    feed.cut(None)
    assert stream.ended  # the producer takes the end mark once the stream has spoken everything
    feed.closed()
    assert feed.next_request() == Cut(None)


async def test_slow_text_is_spoken_sentence_by_sentence():
    clock = Clock()
    feed = ContextText(min_words=4, min_wps=10, clock=clock)
    feed_words(feed, clock, "Glue the sheet to the dark blue background. It is", 2)
    assert feed.next_request() == Sentence("Glue the sheet to the dark blue background.")
    assert feed.next_request() is None  # "It is": unfinished and slow
    feed.cut("f")
    assert feed.next_request() == OpenStream(" It is ", final=True)  # complete before the flush: one stream
    assert feed.next_request() == Cut("f")


async def test_a_rate_drop_finishes_the_begun_sentence_then_ends_the_stream_text():
    clock = Clock()
    feed = ContextText(min_words=4, min_wps=10, clock=clock)
    feed_words(feed, clock, "One two three four five", 20)
    request = feed.next_request()
    stream = Stream()
    feed.opened(stream, request)
    clock.t += 2.0  # the writer stalls mid-sentence: the stream keeps the sentence it began
    feed.add("six seven. Eight")
    assert stream.appended == ["six seven."] and stream.ended
    feed.closed()
    feed.cut(None)
    assert feed.next_request() == OpenStream(" Eight", final=True)


async def test_a_stream_waiting_at_a_sentence_end_ends_its_text_once_the_rate_decays():
    clock = Clock()
    feed = ContextText(min_words=4, min_wps=10, clock=clock)
    feed_words(feed, clock, "One two three four five.", 20)
    stream = Stream()
    feed.opened(stream, feed.next_request())
    assert not stream.ended
    clock.t += 2.0
    feed._on_recheck()  # what the timer does RECHECK_S later
    assert stream.ended


class BoundedStream(Stream):
    """Takes at most `max_words` words (an engine stream's positions); `honest=False`: says every text fits, so only
    `append_text` refuses (the safety net)."""

    def __init__(self, request: OpenStream, max_words: int, honest: bool = True) -> None:
        super().__init__()
        self.text = request.text
        self.max_words = max_words
        self.honest = honest
        self.cancelled = False

    def can_append_text(self, text: str) -> bool:
        return not self.honest or count_words(self.text + text) <= self.max_words

    def append_text(self, text: str) -> None:
        if count_words(self.text + text) > self.max_words:
            raise EngineError("text_too_long", "over max_positions")
        super().append_text(text)
        self.text += text

    def cancel(self) -> None:
        self.cancelled = True


def open_live(feed: ContextText, clock: Clock, words: str, max_words: int, honest: bool = True) -> BoundedStream:
    """`words` at 100 words/s, then the stream they open, live."""
    feed_words(feed, clock, words, 100)
    request = feed.next_request()
    assert isinstance(request, OpenStream) and not request.final
    stream = BoundedStream(request, max_words, honest)
    feed.opened(stream, request)
    return stream


def speak_all(feed: ContextText, max_words: int, honest: bool = True) -> list[BoundedStream]:
    """The producer's side: every request opened and (streams) finished, until the end mark."""
    streams: list[BoundedStream] = []
    while (request := feed.next_request()) != Cut(None):
        assert isinstance(request, OpenStream), request
        stream = BoundedStream(request, max_words, honest)
        streams.append(stream)
        feed.opened(stream, request)
        assert stream.ended  # the text is all there: a stream's text ends when it is full or at the end
        feed.closed()
    return streams


async def test_a_full_stream_ends_its_text_at_a_sentence_end_and_a_fresh_stream_goes_on():
    clock = Clock()
    feed = ContextText(min_words=4, min_wps=10, clock=clock)
    text = " ".join(f"Sentence {n} has five words." for n in range(1, 9))
    feed_words(feed, clock, text, 100)
    feed.cut(None)
    streams = speak_all(feed, max_words=12)
    # 12 words: two 5-word sentences; a third would not fit, so each stream ends its text after two.
    assert [s.text.split() for s in streams] == [text.split()[i:i + 10] for i in range(0, 40, 10)]
    assert feed.rollovers == 3 and not feed.failed


async def test_an_engine_refusing_text_mid_sentence_ends_the_stream_there_and_the_rest_goes_on():
    clock = Clock()
    feed, errors = ContextText(min_words=2, min_wps=10, clock=clock), []
    feed.on_error = errors.append
    first = open_live(feed, clock, "One two.", max_words=6, honest=False)
    feed_words(feed, clock, "Three four five six seven eight nine. Ten eleven.", 100)
    assert first.text.split() == ["One", "two.", "Three", "four", "five", "six"] and first.ended  # mid-sentence
    feed.closed()
    feed.cut(None)
    rest = speak_all(feed, max_words=6, honest=False)
    assert " ".join(s.text for s in rest).split() == ["seven", "eight", "nine.", "Ten", "eleven."]
    assert errors == [] and feed.rollovers == 1 and not feed.failed


async def test_a_sentence_longer_than_a_whole_stream_ends_the_context_with_an_error():
    clock = Clock()
    feed, errors = ContextText(min_words=4, min_wps=10, clock=clock), []
    feed.on_error = errors.append
    stream = open_live(feed, clock, "a b c d", max_words=8)
    feed_words(feed, clock, "e f g h i j k", 100)
    assert stream.cancelled and feed.failed  # the slot is freed now, not when the socket closes
    assert [e.code for e in errors] == ["text_too_long"] and "max_positions" in errors[0].message
    feed.closed()
    feed.add("more text. ")  # dropped, with no more errors: the client was told once
    assert feed.next_request() is None and feed.unspoken_chars == 0 and len(errors) == 1
    feed.cut("f")
    feed.cut(None)
    assert feed.next_request() == Cut("f") and feed.next_request() == Cut(None)  # still answered


async def test_unspoken_text_counts_until_the_request_holding_it_ends():
    """limits.max_buffered_text_chars: text handed to a live stream is unspoken (and held) until the stream ends."""
    clock = Clock()
    feed = ContextText(min_words=2, min_wps=10, clock=clock)
    stream = open_live(feed, clock, "One two three", max_words=100)
    assert feed.unspoken_chars == len("One two three ")
    feed_words(feed, clock, "four five", 100)
    assert stream.appended == ["four ", "five "] and feed.unspoken_chars == len("One two three four five ")
    feed.cut(None)
    assert stream.ended and feed.unspoken_chars == len("One two three four five ")  # ended, still speaking
    feed.closed()
    assert feed.unspoken_chars == 0 and feed.next_request() == Cut(None)


async def test_unspoken_sentences_count_until_their_requests_end():
    feed = ContextText(min_words=4, min_wps=10, clock=Clock())
    feed.add("  Slow one. Slow two. And")  # one message: no rate, so sentence mode for what is complete
    assert feed.next_request() == Sentence("Slow one.")
    assert feed.unspoken_chars == len("Slow one.Slow two. And")  # the whitespace around sentences is not spoken
    feed.closed()
    assert feed.next_request() == Sentence("Slow two.") and feed.unspoken_chars == len("Slow two. And")
    feed.closed()
    assert feed.next_request() is None and feed.unspoken_chars == len(" And")



pieces = st.text(alphabet="ab .\n", min_size=1, max_size=12)
actions = st.lists(st.one_of(st.tuples(st.just("add"), pieces), st.sampled_from(["cut", "wait", "produce"])),
                   max_size=40)


@settings(max_examples=200, deadline=None)
@given(actions)
def test_the_unspoken_count_is_the_text_waiting_plus_the_text_of_the_request_not_ended(steps):
    """The O(1) count (limits.max_buffered_text_chars) against a recount: the text still waiting in the feed, and
    the text of the producer's request (what it opened with and all given to its stream) until that one ends."""
    asyncio.run(_count_along(steps))  # a live stream at a sentence end arms a timer on the running loop


async def _count_along(steps: list) -> None:
    clock = Clock()
    feed = ContextText(min_words=2, min_wps=10, clock=clock)
    request: OpenStream | Sentence | None = None
    stream = Stream()

    def recount() -> int:
        waiting = [*feed._sentences, *(i for i in feed._items if isinstance(i, str))]
        taken = [request.text, *stream.appended] if request is not None else []
        return sum(map(len, waiting)) + sum(map(len, taken))

    for step in [*steps, "cut", *["produce"] * 60]:
        if isinstance(step, tuple):
            feed.add(step[1])
        elif step == "cut":
            feed.cut(None)
        elif step == "wait":
            clock.t += 0.3
        else:  # the producer: the request in hand ends, the next one is taken
            feed.closed()
            taken = feed.next_request()
            request, stream = (taken if isinstance(taken, OpenStream | Sentence) else None), Stream()
            if isinstance(taken, OpenStream):
                feed.opened(stream, taken)
        assert feed.unspoken_chars == recount(), step
    assert feed.unspoken_chars == 0

"""The text-streaming rule (gateway/textfeed.py) and its parts, on a hand-driven clock: no server."""

from __future__ import annotations

import pytest
from voxgate.engine.base import AudioStream, EngineError
from voxgate.gateway.textfeed import Cut, OpenStream, Sentence, TextFeed
from voxgate.gateway.textrate import TextRate
from voxgate.gateway.textsplit import count_words, ends_sentence, first_sentence


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


def feed_words(feed: TextFeed, clock: Clock, text: str, wps: float) -> None:
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
    feed = TextFeed(min_words=4, min_wps=10, clock=clock)
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
    feed = TextFeed(min_words=4, min_wps=10, clock=clock)
    feed_words(feed, clock, "Glue the sheet to the dark blue background. It is", 2)
    assert feed.next_request() == Sentence("Glue the sheet to the dark blue background.")
    assert feed.next_request() is None  # "It is": unfinished and slow
    feed.cut("f")
    assert feed.next_request() == OpenStream(" It is ", final=True)  # complete before the flush: one stream
    assert feed.next_request() == Cut("f")


async def test_a_rate_drop_finishes_the_begun_sentence_then_ends_the_stream_text():
    clock = Clock()
    feed = TextFeed(min_words=4, min_wps=10, clock=clock)
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
    feed = TextFeed(min_words=4, min_wps=10, clock=clock)
    feed_words(feed, clock, "One two three four five.", 20)
    stream = Stream()
    feed.opened(stream, feed.next_request())
    assert not stream.ended
    clock.t += 2.0
    feed._on_recheck()  # what the timer does RECHECK_S later
    assert stream.ended

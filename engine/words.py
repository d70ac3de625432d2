"""Word times: when each word of a request's text is spoken, on its stream's audio timeline.

An engine with `supports_word_times` gives them for a request with `word_times`: `AudioStream.take_words()` returns
the words not yet taken, in text order, each once, and by the time the stream yields a chunk it returns every word
whose audio starts in that chunk (or before it). So a consumer that reads `take_words()` after each chunk has every
word before the audio it describes. Times are measured, never estimated: an engine that cannot measure them does
not declare the capability.

A request with `word_times_hold` False (engines that measure times on the audio, `word_times_by_sentence`) trades
that order for first audio: no audio waits for its words, and a word is taken as soon as it is measured, which can
be after the chunk that holds its start. Such a stream yields an empty chunk to hand over words measured while no
audio was due, and its last words before it ends; a consumer still reads `take_words()` after each chunk.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_TOKEN = re.compile(r"\S+")
_WORD_CHAR = re.compile(r"\w")


@dataclass(frozen=True, slots=True)
class WordTime:
    word: str  # as written in the text (punctuation kept)
    start: int  # samples at SAMPLE_RATE from the stream's first sample
    end: int  # the next word's start, or the end of the audio for a stream's last word


@dataclass(frozen=True, slots=True)
class TextWord:
    text: str
    start: int  # character offsets in the text
    end: int


def text_words(text: str) -> list[TextWord]:
    """The words of a text: runs of non-space characters; a run with no letter or digit (a dash, an ellipsis)
    joins the word before it (or the next, at the start), so the words, joined by spaces, are the text's tokens.
    A text with no letter or digit has no words."""
    words: list[TextWord] = []
    lead: list[re.Match[str]] = []  # punctuation before the first word
    for m in _TOKEN.finditer(text):
        if _WORD_CHAR.search(m.group()):
            first = lead[0].start() if lead else m.start()
            words.append(TextWord(" ".join([*(x.group() for x in lead), m.group()]), first, m.end()))
            lead = []
        elif words:
            last = words[-1]
            words[-1] = TextWord(f"{last.text} {m.group()}", last.start, m.end())
        else:
            lead.append(m)
    return words

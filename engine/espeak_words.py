"""espeak-ng's word events, read from its synth callback's event list, as word times on an espeak stream's timeline.

espeak reports each word it speaks (`espeakEVENT_WORD`) with its position in the text and in the audio, in the
callback call whose audio holds that position. Those are the times: a word starts at its event's audio position and
ends where the next word starts (the last word of a sentence at the end of the sentence's audio).
"""

from __future__ import annotations

import bisect
import ctypes
from dataclasses import dataclass

from .base import SAMPLE_RATE
from .words import TextWord, WordTime, text_words

_EVENT_LIST_TERMINATED = 0
_EVENT_WORD = 1


class EspeakEvent(ctypes.Structure):
    """`espeak_EVENT` of speak_lib.h."""

    _fields_ = [
        ("type", ctypes.c_int),
        ("unique_identifier", ctypes.c_uint),
        ("text_position", ctypes.c_int),  # 1-based, in characters of the text
        ("length", ctypes.c_int),  # characters, for word events
        ("audio_position", ctypes.c_int),  # ms from the start of this espeak_Synth's audio
        ("sample", ctypes.c_int),  # (internal use)
        ("user_data", ctypes.c_void_p),
        ("id", ctypes.c_char * 8),  # a union of int number, const char *name and char string[8]
    ]


def word_events(events: int | None) -> list[tuple[int, int]]:
    """(text_position, audio_position ms) of each word event in a callback's list (ended by a terminator)."""
    if not events:
        return []
    table = ctypes.cast(events, ctypes.POINTER(EspeakEvent))
    found = []
    i = 0
    while (event := table[i]).type != _EVENT_LIST_TERMINATED:
        if event.type == _EVENT_WORD:
            found.append((event.text_position, event.audio_position))
        i += 1
    return found


@dataclass(slots=True)
class _Open:
    first: int  # index of its first text word (words espeak spoke no event for join the word before them)
    last: int
    start: int


class WordClock:
    """The word times of one espeak stream, sentence by sentence (each one espeak_Synth), at SAMPLE_RATE.

    Its words are those of `text_words`; a word espeak gives no event of its own (it read it as part of another)
    joins the word before it, so every word of the text is reported once, in order."""

    def __init__(self, native_rate: int) -> None:
        self._rate = native_rate
        self._native = 0  # native samples of the stream so far
        self._base = 0  # SAMPLE_RATE samples of the stream before the current sentence
        self._words: list[TextWord] = []
        self._ends: list[int] = []
        self._open: _Open | None = None
        self._active = False
        self._done: list[WordTime] = []

    def begin(self, sentence: str) -> None:
        self._words = text_words(sentence)
        self._ends = [w.end for w in self._words]
        self._open = None
        self._active = True
        self._base = self._output(self._native)

    def on_piece(self, events: list[tuple[int, int]], native_samples: int) -> None:
        """One callback's word events and audio length."""
        for text_position, audio_ms in events:
            index = bisect.bisect_right(self._ends, text_position - 1)  # the word holding it, or the next one
            if index >= len(self._words):
                continue
            start = self._base + audio_ms * SAMPLE_RATE // 1000
            if self._open is None:
                self._open = _Open(0, index, start)  # words before the first event join it
            elif index > self._open.last:
                self._finish(index, max(start, self._open.start))
                self._open = _Open(index, index, max(start, self._open.start))
        self._native += native_samples

    def end_sentence(self) -> None:
        end = self._output(self._native)
        if self._open is None and self._words:  # no event at all: the sentence's audio holds its words
            self._open = _Open(0, 0, self._base)
        if self._open is not None:
            self._finish(len(self._words), max(end, self._open.start))
        self._active = False
        self._open = None

    def _output(self, native: int) -> int:
        """Where the stream's resampled audio is after `native` samples: soxr's stream gives round(n * ratio) in
        all, so a stream's last word ends exactly where its audio does."""
        return (2 * native * SAMPLE_RATE + self._rate) // (2 * self._rate)

    def _finish(self, next_index: int, end: int) -> None:
        assert self._open is not None
        text = " ".join(w.text for w in self._words[self._open.first:next_index])
        self._done.append(WordTime(text, self._open.start, end))

    def hold_from(self) -> int | None:
        """Where audio must wait (stream samples): from the start of the word whose end is not yet known (the
        sentence's start before its first event); None: nothing is held."""
        if not self._active or not self._words:
            return None
        return self._open.start if self._open is not None else self._base

    def take(self) -> list[WordTime]:
        done, self._done = self._done, []
        return done

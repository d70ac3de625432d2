"""Where the server cuts streamed text into synthesis segments (docs/protocol.md, "Text cutting").

Everything here runs on the event loop on text a client chose, so every function is linear in its input: a sentence
end is found by a character-class search (no backtracking), and a run of sentence-end characters is walked once with
possessive quantifiers, never retried from each of its characters. `ScanCost` counts the characters each search
examines, so tests can hold the work to a multiple of the text's length.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_SEGMENT_CHARS = 300
_ENDS = ".!?;…。！？；"
_CLOSERS = "\"'”’)]"
# Where a sentence end may begin: a sentence-end character, or a newline (an end by itself).
_CANDIDATE = re.compile(f"[{re.escape(_ENDS)}\n]")
# The whole run from there: sentence-end characters, then closing quotes and brackets; possessive, so a run that
# is not followed by whitespace fails once, in one pass over it.
_RUN = re.compile(f"[{re.escape(_ENDS)}]*+[{re.escape(_CLOSERS)}]*+")
_CLOSING = re.compile(f"[{re.escape(_CLOSERS)}]*+")
# A clause end: a comma, colon or dash, then whitespace (`first_clause_words`).
_CLAUSE = re.compile(r"[,:，、—](?=\s)")


@dataclass(slots=True)
class ScanCost:
    """Characters examined by the searches (the work a hostile text can buy)."""

    chars: int = 0


def find_sentence_end(text: str, start: int = 0, cost: ScanCost | None = None,
                      run_start: int = -1) -> tuple[int, int, int]:
    """The first sentence end at or after `start`: (its end or -1, where a later search resumes, the start of the
    run found or of the unfinished run at the end of `text`, else -1).

    A sentence end is a run of sentence-end characters and closing quotes followed by whitespace (recognised only
    once that character exists: "3.14" and "e.g." mid-word are not cut), or a newline. Not found, a run reaching the
    end of `text` is where text appended later may complete one: the search resumes at the end of `text`, with
    `run_start` >= 0 saying that `text[run_start:]` is such a run, walked already."""
    pos = start
    if 0 <= run_start < start:  # go on walking the run the last search ended in
        walk = _CLOSING if text[start - 1] in _CLOSERS else _RUN
        end = walk.match(text, start).end()
        if cost is not None:
            cost.chars += end + 1 - start
        if end == len(text):
            return -1, end, run_start
        if text[end].isspace():
            return end, end, run_start
        pos = end
    while True:
        candidate = _CANDIDATE.search(text, pos)
        if candidate is None:
            if cost is not None:
                cost.chars += len(text) - pos
            return -1, len(text), -1
        begin = candidate.start()
        if text[begin] == "\n":
            if cost is not None:
                cost.chars += begin + 1 - pos
            return begin + 1, begin + 1, begin
        end = _RUN.match(text, begin).end()
        if cost is not None:
            cost.chars += end + 1 - pos
        if end == len(text):
            return -1, end, begin
        if text[end].isspace():
            return end, end, begin
        pos = end  # not followed by whitespace: no end inside this run either


def ends_sentence(text: str, following: str = "") -> bool:
    """Whether `text` ends at a sentence end, judged with the first character of `following` when there is one
    (without it, a trailing "." counts: nothing more has come to say otherwise)."""
    stripped = text.rstrip()
    if not stripped or "\n" in text[len(stripped):]:
        return True
    if stripped == text and following and not following[0].isspace():
        return False
    body = stripped.rstrip(_CLOSERS)
    return bool(body) and body[-1] in _ENDS


def first_sentence(text: str) -> tuple[str, str]:
    """`text` cut after its first recognised sentence end (head, rest); (text, "") when it has none."""
    end, _, _ = find_sentence_end(text)
    return (text, "") if end < 0 else (text[:end], text[end:])


def count_words(text: str, after_space: bool = True) -> int:
    """Words that start in `text`; `after_space`: whether the text before it ended in whitespace (so a piece that
    continues a word, "lo" after "hel", starts none)."""
    words = len(text.split())
    if words and not after_space and not text[0].isspace():
        words -= 1
    return words


class TextSegmenter:
    """Accumulates appended text and hands out complete segments, in order.

    The buffer is searched from where the last search left off, never again from its start, so appending n
    characters in any number of pieces costs O(n) search work (`cost`)."""

    def __init__(self, max_segment_chars: int = MAX_SEGMENT_CHARS, first_clause_words: int = 0) -> None:
        self.max_segment_chars = max_segment_chars
        # > 0: the first segment ends at the first clause end (comma, colon, dash) after at least this many words,
        # when one comes before the first sentence end: a shorter first segment is made and timed sooner.
        self.first_clause_words = first_clause_words
        self._clause_from = 0 if first_clause_words > 0 else -1  # where the clause search resumes; -1: done
        self.cost = ScanCost()
        self._buffer = ""
        self._resume = 0  # no sentence end starts before this index of the buffer...
        self._found = -1  # a sentence end already found (its end index), not yet cut
        self._run_start = -1  # the start of the run `_found` ends, or of one up to `_resume` new text may complete

    @property
    def buffered_chars(self) -> int:
        return len(self._buffer)

    def append(self, text: str) -> list[str]:
        self._buffer += text
        return self._take(final=False)

    def flush(self) -> list[str]:
        """Everything buffered, cut at sentence ends where possible (a flush or the context's end)."""
        return self._take(final=True)

    def _next_end(self) -> int:
        if self._found < 0 and self._resume < len(self._buffer):  # else: nothing new to look at
            self._found, self._resume, self._run_start = find_sentence_end(self._buffer, self._resume, self.cost,
                                                                           self._run_start)
        return self._found

    def _shift(self, cut: int) -> None:
        """The search state after the buffer's first `cut` characters went into a segment."""
        self._resume = max(0, self._resume - cut)
        if 0 <= self._found <= cut:  # the cut took the end found
            self._found = self._run_start = -1
            return
        if self._found >= 0:
            self._found -= cut
        if self._run_start < 0:
            return
        if cut <= self._run_start:
            self._run_start -= cut
        elif self._buffer and self._buffer[0] in _ENDS:  # a hard cut inside the run: its rest is still one
            self._run_start = 0
        else:  # the cut took the run's sentence-end characters: closing quotes alone end nothing
            if self._found >= 0:
                self._resume, self._found = self._found, -1
            self._run_start = -1

    def _first_clause(self, end: int) -> int:
        """The end of the first clause of `first_clause_words` words or more before `end` (the first sentence end,
        or -1), within the first `max_segment_chars`; -1 when none (yet). Each character is searched once."""
        limit = min(len(self._buffer) if end < 0 else end, self.max_segment_chars)
        self.cost.chars += max(0, limit - self._clause_from)
        # (one character past the limit: the whitespace after a mark just inside it)
        for mark in _CLAUSE.finditer(self._buffer, self._clause_from, limit + 1):
            if mark.start() >= limit:
                break
            if count_words(self._buffer[: mark.start()]) >= self.first_clause_words:
                return mark.end()
        self._clause_from = max(self._clause_from, limit - 1, 0)  # (a mark at the end waits for its whitespace)
        return -1

    def _take(self, final: bool) -> list[str]:
        segments: list[str] = []
        while True:
            end = self._next_end()
            clause = self._first_clause(end) if self._clause_from >= 0 else -1
            if clause >= 0:
                cut = clause
            elif 0 <= end <= self.max_segment_chars:
                cut = end
            elif len(self._buffer) > self.max_segment_chars:
                space = self._buffer.rfind(" ", 0, self.max_segment_chars)
                cut = space + 1 if space > 0 else self.max_segment_chars
            else:
                break
            segment, self._buffer = self._buffer[:cut], self._buffer[cut:]
            self._shift(cut)
            if segment.strip():
                segments.append(segment.strip())
                self._clause_from = -1  # only the first segment may end at a clause
            elif self._clause_from >= 0:
                self._clause_from = max(0, self._clause_from - cut)
        if final:
            if self._buffer.strip():
                segments.append(self._buffer.strip())
                self._clause_from = -1
            self._buffer = ""
            self._resume, self._run_start, self._found = 0, -1, -1
            self._clause_from = min(self._clause_from, 0)
        return segments

"""Where the server cuts streamed text into synthesis segments (docs/protocol.md, "Text cutting")."""

from __future__ import annotations

import re

MAX_SEGMENT_CHARS = 300
# A sentence end, recognised only once the next character exists: "3.14" and "e.g." mid-word are not cut.
_SENTENCE_END = re.compile(r"([.!?;…。！？；]+[\"'”’)\]]*)(?=\s)|\n")
# A sentence end at the very end of the text, its confirming character not yet arrived.
_TRAILING_END = re.compile(r"[.!?;…。！？；]+[\"'”’)\]]*$")


def ends_sentence(text: str, following: str = "") -> bool:
    """Whether `text` ends at a sentence end, judged with the first character of `following` when there is one
    (without it, a trailing "." counts: nothing more has come to say otherwise)."""
    stripped = text.rstrip()
    if not stripped or "\n" in text[len(stripped):]:
        return True
    if stripped != text or not following:
        return _TRAILING_END.search(stripped) is not None
    return following[0].isspace() and _TRAILING_END.search(stripped) is not None


def first_sentence(text: str) -> tuple[str, str]:
    """`text` cut after its first recognised sentence end (head, rest); (text, "") when it has none."""
    match = _SENTENCE_END.search(text)
    return (text, "") if match is None else (text[: match.end()], text[match.end():])


def count_words(text: str, after_space: bool = True) -> int:
    """Words that start in `text`; `after_space`: whether the text before it ended in whitespace (so a piece that
    continues a word, "lo" after "hel", starts none)."""
    words = len(text.split())
    if words and not after_space and not text[0].isspace():
        words -= 1
    return words


class TextSegmenter:
    """Accumulates appended text and hands out complete segments, in order."""

    def __init__(self, max_segment_chars: int = MAX_SEGMENT_CHARS) -> None:
        self.max_segment_chars = max_segment_chars
        self._buffer = ""

    @property
    def buffered_chars(self) -> int:
        return len(self._buffer)

    def append(self, text: str) -> list[str]:
        self._buffer += text
        return self._take(final=False)

    def flush(self) -> list[str]:
        """Everything buffered, cut at sentence ends where possible (a flush or the context's end)."""
        return self._take(final=True)

    def _take(self, final: bool) -> list[str]:
        segments: list[str] = []
        while True:
            match = _SENTENCE_END.search(self._buffer)
            if match is not None and match.end() <= self.max_segment_chars:
                cut = match.end()
            elif len(self._buffer) > self.max_segment_chars:
                space = self._buffer.rfind(" ", 0, self.max_segment_chars)
                cut = space + 1 if space > 0 else self.max_segment_chars
            else:
                break
            segment, self._buffer = self._buffer[:cut], self._buffer[cut:]
            if segment.strip():
                segments.append(segment.strip())
        if final:
            if self._buffer.strip():
                segments.append(self._buffer.strip())
            self._buffer = ""
        return segments

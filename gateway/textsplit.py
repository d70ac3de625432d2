"""Where the server cuts streamed text into synthesis segments (docs/protocol.md, "Text cutting")."""

from __future__ import annotations

import re

MAX_SEGMENT_CHARS = 300
# A sentence end, recognised only once the next character exists: "3.14" and "e.g." mid-word are not cut.
_SENTENCE_END = re.compile(r"([.!?;…。！？；]+[\"'”’)\]]*)(?=\s)|\n")


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

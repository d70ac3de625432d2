"""How fast a context's text arrives, in words per second (the text-streaming rule of docs/protocol.md)."""

from __future__ import annotations

from collections import deque

from .text_split import count_words

RATE_WINDOW_S = 1.0  # long enough to span a few LLM tokens at 2 words/s, short enough to notice a stall at once


class TextRate:
    """Words counted as they arrive; `wps(now)` is the rate over the last `window_s`.

    The rate is the words that arrived after the oldest message of the window, over the time since that message:
    a lone burst measures 0 (one message says nothing about what follows), and silence makes the rate decay
    continuously, so a writer that stops is noticed without waiting for its next message."""

    def __init__(self, window_s: float = RATE_WINDOW_S) -> None:
        self.window_s = window_s
        self.words = 0
        self.last_at: float | None = None  # when the last text arrived
        self._arrivals: deque[tuple[float, int]] = deque()  # (time, words counted after it arrived)
        self._after_space = True

    def add(self, text: str, now: float) -> None:
        if not text:
            return
        self.words += count_words(text, self._after_space)
        self._after_space = text[-1].isspace()
        self._arrivals.append((now, self.words))
        self.last_at = now

    def wps(self, now: float) -> float:
        arrivals = self._arrivals
        while len(arrivals) > 1 and arrivals[0][0] < now - self.window_s:
            arrivals.popleft()
        if not arrivals:
            return 0.0
        since, words_then = arrivals[0]
        if now <= since:
            return 0.0
        return (self.words - words_then) / (now - since)

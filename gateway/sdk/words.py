"""A turn's word timestamps as the SDK shows them: the words so far, and an async iterator that waits for more."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Word:
    """A word of a turn and when it is heard (the protocol's `timestamps` event, docs/protocol.md)."""

    word: str  # as written in the text
    start_ms: float  # from the turn's first sample
    end_ms: float
    start_pts: int  # the same, on the track's timeline (samples at the session rate): compare with played_pts
    end_pts: int


class WordLog:
    """The words of one turn, in order; iterators over it end when the turn ends (done, cancelled or failed)."""

    def __init__(self) -> None:
        self.words: list[Word] = []
        self.ended = False
        self._more = asyncio.Event()

    def add(self, msg: dict[str, Any], start_pts: int, rate: int) -> None:
        for w in msg["words"]:
            start, end = (start_pts + round(w[key] * rate / 1000) for key in ("start_ms", "end_ms"))
            self.words.append(Word(w["word"], w["start_ms"], w["end_ms"], start, end))
        self._more.set()

    def end(self) -> None:
        self.ended = True
        self._more.set()

    async def follow(self) -> AsyncIterator[Word]:
        """Every word, from the first, as it arrives, until the turn ends."""
        index = 0
        while True:
            while index < len(self.words):
                yield self.words[index]
                index += 1
            if self.ended:
                return
            self._more.clear()
            await self._more.wait()

"""Text that arrives in pieces (an LLM's tokens), as the content ids the whole text will have.

The streaming-text layout feeds one text id a frame, so ids are committed while the text is still growing, and a
committed id can never change. The Qwen2 pre-tokenizer splits text into pieces (a word with the space or
punctuation before it, a digit, a run of punctuation, a run of whitespace) and BPE merges only inside a piece, so
the ids of a prefix are a prefix of the whole text's ids when the cut falls where no piece can cross: before a
single space that follows a non-space and precedes a non-space ("the cat| sat"). A piece never runs from a non-space
into a space after it, and " sat" starts a piece of its own. Text after the last such cut waits for more text
(the word may go on) or for the end. `end()` tokenizes the whole text and goes on from the committed ids
(tests/qwen3tts/test_text_feed.py holds the rule to "a prefix of the whole" on random texts and splits).
"""

from __future__ import annotations

import logging
import re

from .model.prompt import target_text
from .model.tokenizer import TextTokenizer

log = logging.getLogger("voxgate.engine.qwen3tts")
ROLE_IDS = 3  # `<|im_start|>assistant\n` before the content
END_IDS = 5  # `<|im_end|>\n<|im_start|>assistant\n` after it


_CUT = re.compile(r"(?<=\S) (?=\S)")  # a single space between two non-spaces


def safe_cut(text: str, start: int = 1) -> int:
    """The length of the longest prefix whose ids cannot change with what follows: up to the last single space
    between two non-spaces, looked for from `start` on (0: none there). Linear: streamed text is looked at once."""
    cut = 0
    for match in _CUT.finditer(text, max(1, start)):
        cut = match.start()
    return cut


class TextFeed:
    """Content ids of a text that arrives in pieces: `committed` grows by `append`, `end` gives the rest."""

    def __init__(self, tokenizer: TextTokenizer, text: str = "") -> None:
        self.tokenizer = tokenizer
        self.text = ""
        self.committed: list[int] = []
        self._cut = 0  # characters of `text` whose ids are committed
        self._checked = 1  # cuts before this index of `text` are known (a cut needs the character after it)
        self.ended = False
        self.append(text)

    def content_ids(self, text: str) -> list[int]:
        """The content ids of `text` as a whole (what `end` would have committed, had it been the text)."""
        return self.tokenizer.encode(target_text(text))[ROLE_IDS:-END_IDS]

    def append(self, text: str) -> list[int]:
        """Add text; returns the ids this made final (possibly none)."""
        if self.ended:
            raise ValueError("the text has ended")
        self.text += text
        cut = safe_cut(self.text, self._checked)
        self._checked = max(1, len(self.text) - 1)
        if cut <= self._cut:
            return []
        ids = self.content_ids(self.text[:cut])
        new = ids[len(self.committed):]
        self.committed, self._cut = ids, cut
        return new

    def end(self) -> list[int]:
        """No more text: the ids of what is left. Should the committed ids not be a prefix of the whole text's (the
        cut rule broken by some text: a bug, never the caller's fault), the stream goes on with the rest and a
        warning is logged: the ids already spoken cannot be taken back."""
        self.ended = True
        ids = self.content_ids(self.text)
        if ids[: len(self.committed)] != self.committed:
            log.warning("streamed text tokenized apart from the whole text after %r", self.text[: self._cut][-40:])
        new = ids[len(self.committed):]
        self.committed = ids
        return new

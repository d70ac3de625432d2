"""Text cutting is linear in its input (issue 23, finding 1): a text.append or an HTTP input of 10,000 "." froze the
event loop for 15-20 s, because the sentence-end pattern backtracked quadratically on a run of sentence-end
characters and ran again for every cut. The splitter is checked here against its plain reference (the old pattern,
on inputs short enough for it), for no loss of text, and for work that grows linearly (characters examined, counted
by the splitter itself); tests/reliability/test_hostile_text.py checks that a bystander's ping stays quick."""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from voxgate.engine.qwen3tts.text_feed import safe_cut
from voxgate.gateway.config import Limits
from voxgate.gateway.session.text_split import ScanCost, TextSegmenter, ends_sentence, find_sentence_end, first_sentence

ENDS = ".!?;…。！？；"
MAX_TEXT = Limits().max_text_chars

# The reference: the pattern the splitter had, and its cut loop (quadratic, so only for short inputs).
_REFERENCE_END = re.compile(r"([.!?;…。！？；]+[\"'”’)\]]*)(?=\s)|\n")
_REFERENCE_TRAILING = re.compile(r"[.!?;…。！？；]+[\"'”’)\]]*$")


class ReferenceSegmenter:
    def __init__(self, max_segment_chars: int, first_clause_words: int = 0) -> None:
        self.max_segment_chars = max_segment_chars
        self.first_clause_words = first_clause_words  # until a segment is out: the first may end at a clause
        self.buffer = ""

    def append(self, text: str) -> list[str]:
        self.buffer += text
        return self.take(final=False)

    def flush(self) -> list[str]:
        return self.take(final=True)

    def take(self, final: bool) -> list[str]:
        out = []
        while True:
            match = _REFERENCE_END.search(self.buffer)
            clause = self.first_clause(match.end() if match is not None else len(self.buffer))
            if clause is not None:
                cut = clause
            elif match is not None and match.end() <= self.max_segment_chars:
                cut = match.end()
            elif len(self.buffer) > self.max_segment_chars:
                space = self.buffer.rfind(" ", 0, self.max_segment_chars)
                cut = space + 1 if space > 0 else self.max_segment_chars
            else:
                break
            segment, self.buffer = self.buffer[:cut], self.buffer[cut:]
            if segment.strip():
                out.append(segment.strip())
                self.first_clause_words = 0
        if final:
            if self.buffer.strip():
                out.append(self.buffer.strip())
                self.first_clause_words = 0
            self.buffer = ""
        return out

    def first_clause(self, sentence_end: int) -> int | None:
        """Every clause mark before the first sentence end and within the segment limit, tried from the start."""
        if not self.first_clause_words:
            return None
        for i in range(min(sentence_end, self.max_segment_chars)):
            if self.buffer[i] in ",:，、—" and i + 1 < len(self.buffer) and self.buffer[i + 1].isspace() \
                    and len(self.buffer[:i].split()) >= self.first_clause_words:
                return i + 1
        return None


def reference_ends_sentence(text: str, following: str = "") -> bool:
    stripped = text.rstrip()
    if not stripped or "\n" in text[len(stripped):]:
        return True
    if stripped != text or not following:
        return _REFERENCE_TRAILING.search(stripped) is not None
    return following[0].isspace() and _REFERENCE_TRAILING.search(stripped) is not None


def reference_safe_cut(text: str) -> int:
    for i in range(len(text) - 2, 0, -1):
        if text[i] == " " and not text[i - 1].isspace() and not text[i + 1].isspace():
            return i
    return 0


# Adversarial text: sentence ends, closers, whitespace of several kinds, and a few letters.
hostile_text = st.text(alphabet=ENDS + "\"'”’)]\n \t\u3000ab3", max_size=80)
# ... and clause marks (word-times turns' first clause: first_clause_words)
clause_text = st.text(alphabet=ENDS + ",:，、—\"'\n \tab", max_size=80)


def pieces_of(text: str, data: st.DataObject) -> list[str]:
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=8)))
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


def cut_both_ways(text: str, max_chars: int, words: int, data: st.DataObject) -> tuple[list[str], list[str], int, int]:
    """(TextSegmenter's segments, the reference's, the pieces) for `text` appended in random pieces and flushes."""
    fast, reference = TextSegmenter(max_chars, first_clause_words=words), ReferenceSegmenter(max_chars, words)
    got, want = [], []
    pieces = pieces_of(text, data)
    for piece in pieces:
        got += fast.append(piece)
        want += reference.append(piece)
        if data.draw(st.booleans()):
            got += fast.flush()
            want += reference.flush()
    got += fast.flush()
    want += reference.flush()
    # No loss: every character that is not whitespace comes out, in order.
    assert "".join("".join(got).split()) == "".join(text.split())
    return got, want, fast.cost.chars, len(pieces)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(text=hostile_text, max_chars=st.integers(1, 30), data=st.data())
def test_the_segmenter_cuts_as_its_reference_does(text: str, max_chars: int, data: st.DataObject) -> None:
    got, want, cost, pieces = cut_both_ways(text, max_chars, 0, data)
    assert got == want
    assert cost <= 3 * len(text) + 2 * pieces + 2


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(text=clause_text, max_chars=st.integers(1, 30), words=st.integers(1, 3), data=st.data())
def test_a_first_clause_is_cut_as_the_reference_cuts_it(text: str, max_chars: int, words: int,
                                                        data: st.DataObject) -> None:
    got, want, cost, pieces = cut_both_ways(text, max_chars, words, data)
    assert got == want
    assert cost <= 4 * len(text) + 3 * pieces + 2


def test_a_first_clause_of_enough_words_is_its_own_segment() -> None:
    text = "Well, the birch canoe: it slid on the planks, slowly. Glue the sheet, now."
    assert TextSegmenter(first_clause_words=3).append(text) == ["Well, the birch canoe:",
                                                                 "it slid on the planks, slowly."]
    assert TextSegmenter().append(text) == ["Well, the birch canoe: it slid on the planks, slowly."]
    assert TextSegmenter(first_clause_words=3).append("One two three four. Five, six seven eight, nine.") == [
        "One two three four."]  # no clause before the first sentence end: the first segment is the sentence
    segmenter = TextSegmenter(4, first_clause_words=1)  # a mark just inside the limit, its whitespace just past it
    assert segmenter.append(":a : ") + segmenter.flush() == [":a :"]


@settings(max_examples=300, deadline=None)
@given(text=hostile_text, following=hostile_text)
def test_sentence_end_helpers_agree_with_the_reference(text: str, following: str) -> None:
    match = _REFERENCE_END.search(text)
    assert find_sentence_end(text)[0] == (match.end() if match else -1)
    assert first_sentence(text) == ((text, "") if match is None else (text[: match.end()], text[match.end():]))
    assert ends_sentence(text, following) == reference_ends_sentence(text, following)
    assert safe_cut(text) == reference_safe_cut(text)


@pytest.mark.slow
@pytest.mark.parametrize("run", [*ENDS, '."', "?!)", "…’"])
def test_work_is_linear_in_a_run_of_sentence_ends_of_every_length(run: str) -> None:
    """Every length up to the message limit, then a space (the end confirmed), a word (no end) or nothing (not yet
    known): the characters the search examines stay within a small multiple of the text."""
    longest = (run * (MAX_TEXT // len(run) + 1))[:MAX_TEXT]
    # A mixed run is walked in Python one sentence-end group at a time: its lengths are sampled, not all tried.
    lengths = range(1, MAX_TEXT + 1) if len(run) == 1 else [*range(1, 300), *range(300, MAX_TEXT + 1, 211), MAX_TEXT]
    for length in lengths:
        text = longest[:length]
        for tail in ("", " next", "x"):
            cost = ScanCost()
            find_sentence_end(text + tail, 0, cost)
            assert cost.chars <= 2 * (length + len(tail)) + 2, (run, length, tail)


@pytest.mark.slow
@pytest.mark.parametrize("run", [".", "…", '."'])
def test_the_segmenter_cuts_a_long_run_in_linear_work(run: str) -> None:
    """The segmenter hard-cuts a run longer than a segment every 300 characters: each cut must not search the rest
    of the run again."""
    longest = (run * (MAX_TEXT // len(run) + 1))[:MAX_TEXT]
    for length in [*range(1, 1000), *range(1000, MAX_TEXT + 1, 97), MAX_TEXT]:
        for tail in ("", " next", "x"):
            segmenter = TextSegmenter()
            segments = segmenter.append(longest[:length] + tail) + segmenter.flush()
            assert "".join(segments).replace(" ", "") == (longest[:length] + tail).replace(" ", "")
            assert segmenter.cost.chars <= 2 * (length + len(tail)) + 2, (run, length, tail)


@pytest.mark.parametrize("run", [".", "。", '."'])
def test_work_is_linear_when_a_run_arrives_one_piece_at_a_time(run: str) -> None:
    segmenter = TextSegmenter()
    for _ in range(Limits().max_buffered_text_chars // len(run)):
        segmenter.append(run)
    assert segmenter.cost.chars <= 3 * Limits().max_buffered_text_chars


def test_first_sentence_and_a_long_run_cost_one_pass() -> None:
    cost = ScanCost()
    text = "." * MAX_TEXT + "x" + "!" * MAX_TEXT
    assert find_sentence_end(text, 0, cost)[0] == -1
    assert cost.chars <= 2 * len(text) + 2
    assert first_sentence(text + " y") == (text, " y")

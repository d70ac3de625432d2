"""Streamed text's ids (engine/qwen3tts/text_feed.py): what is committed while the text grows is always a prefix of
the whole text's ids, whatever the split, and the whole is what one tokenization of the whole text gives."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from voxgate.engine.qwen3tts.model.prompt import target_text
from voxgate.engine.qwen3tts.model.tokenizer import TextTokenizer
from voxgate.engine.qwen3tts.text_feed import TextFeed, safe_cut

from .test_tokenizer import CORPUS

TEXTS = [*CORPUS, "The birch canoe slid on the smooth planks. Glue the sheet to the dark blue background.",
         "It's   easy  to tell the depth of a well.\nThe juice of lemons makes fine punch!", "a b c d e f g",
         "Numbers: 12 345 6,789 and 3.5 or .5 - -7 +8", "don't, won't; I'll - we'd 'quoted' \"double\"",
         " leading space and trailing ", "tab\tseparated\twords and  double  spaces"]


@pytest.fixture(scope="module")
def tokenizer(shared: Path) -> TextTokenizer:
    return TextTokenizer(shared / "text-tokenizer")


def _whole(tokenizer: TextTokenizer, text: str) -> list[int]:
    return tokenizer.encode(target_text(text))[3:-5]


def test_safe_cut() -> None:
    assert safe_cut("the cat sat") == 7 and safe_cut("the cat sat ") == 7 and safe_cut("word") == 0
    assert safe_cut("a  b") == 0  # a double space: the run may tokenize with what follows
    assert safe_cut("x\ny z") == 3


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(20))
def test_any_split_commits_a_prefix_of_the_whole(tokenizer: TextTokenizer, seed: int) -> None:
    rng = random.Random(seed)
    for text in TEXTS:
        cuts = sorted(rng.sample(range(1, len(text)), k=min(len(text) - 1, rng.randint(1, 12))))
        pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
        whole = _whole(tokenizer, text)
        feed = TextFeed(tokenizer, pieces[0])
        got = list(feed.committed)
        for piece in pieces[1:]:
            got += feed.append(piece)
            assert got == feed.committed == whole[: len(got)], (text, pieces)
        got += feed.end()
        assert got == whole, (text, pieces)


def test_word_by_word_commits_as_it_goes(tokenizer: TextTokenizer) -> None:
    """An LLM's words arrive with their spaces: each word is final once the next one starts."""
    words = ["The", "birch", "canoe", "slid", "on", "the", "smooth", "planks."]
    feed = TextFeed(tokenizer, words[0])
    counts = [len(feed.committed)]
    for w in words[1:]:
        feed.append(" " + w)
        counts.append(len(feed.committed))
    assert counts[0] == 0 and counts[-1] > 0 and counts == sorted(counts) and len(set(counts)) >= len(words) - 1
    feed.end()
    with pytest.raises(ValueError):
        feed.append(" more")

"""The aligner's units: the pieces of a text that get a start and an end time.

The checkpoint was trained on this split (the reference's rule for space-separated languages and Chinese): each
whitespace-separated token keeps only its letters, digits and apostrophes; every CJK ideograph is a unit of its own,
and each run of other kept characters between them is one unit. Punctuation therefore never gets a time, and
"don't" stays one unit. Japanese and Korean need a word segmenter (the reference uses nagisa and soynlp); this
port does not have one, so their text is split by the same rule (kana and hangul runs stay whole).
Each unit keeps the character span it came from, so times can be mapped back to our own word split.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

_TOKEN = re.compile(r"\S+")
_ASCII_KEPT = re.compile(r"[A-Za-z0-9']+")  # is_kept's characters among ASCII's (letters, digits, apostrophe)
# CJK Unified Ideographs, Extension A, Extensions B-E and the Compatibility Ideographs.
_CJK = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
        (0x2B820, 0x2CEAF), (0xF900, 0xFAFF))


@dataclass(frozen=True, slots=True)
class Unit:
    text: str  # the kept characters only
    start: int  # character span in the text (first kept character to last, inclusive-exclusive)
    end: int


def is_cjk(ch: str) -> bool:
    code = ord(ch)
    return any(lo <= code <= hi for lo, hi in _CJK)


def is_kept(ch: str) -> bool:
    return ch == "'" or unicodedata.category(ch)[0] in "LN"


def split_units(text: str) -> list[Unit]:
    units: list[Unit] = []
    for token in _TOKEN.finditer(text):
        if token.group().isascii():  # most tokens: no CJK, kept = [A-Za-z0-9'], so one unit of them or none
            kept = list(_ASCII_KEPT.finditer(token.group()))
            if kept:
                units.append(Unit("".join(m.group() for m in kept), token.start() + kept[0].start(),
                                  token.start() + kept[-1].end()))
        else:
            units += _token_units(token)
    return units


def _token_units(token: re.Match[str]) -> list[Unit]:
    """One token's units, character by character (any script; split_units_ref's rule)."""
    units: list[Unit] = []
    run: list[tuple[int, str]] = []  # (offset, char) of the pending non-CJK unit
    # A CJK character (or the token's end) closes the pending run; dropped characters do not, so the
    # characters around them join ("a-b" -> "ab").
    for offset, ch in [*enumerate(token.group(), start=token.start()), (token.end(), "")]:
        if ch and not is_kept(ch):
            continue
        if not ch or is_cjk(ch):
            if run:
                units.append(Unit("".join(c for _, c in run), run[0][0], run[-1][0] + 1))
                run = []
            if ch:
                units.append(Unit(ch, offset, offset + 1))
        else:
            run.append((offset, ch))
    return units


def split_units_ref(text: str) -> list[Unit]:
    """split_units with every token taken character by character (the reference its ASCII fast path is tested
    against)."""
    return [unit for token in _TOKEN.finditer(text) for unit in _token_units(token)]

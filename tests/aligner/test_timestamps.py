"""The order repair and the unit split against the reference's own functions (no checkpoint needed), plus worked
examples that pin the rules without the oracle."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from voxgate.engine.aligner.timestamps import repair, trusted, trusted_ref, unit_times
from voxgate.engine.aligner.units import is_kept, split_units, split_units_ref

from .reference import import_reference


@pytest.fixture(scope="module")
def ref_processor():
    return import_reference().Qwen3ForceAlignProcessor()


@pytest.mark.parametrize(("values", "expected"), [
    ([], []),
    ([80.0, 160.0, 240.0], [80, 160, 240]),
    ([80.0, 4000.0, 160.0, 240.0], [80, 80, 160, 240]),  # one outlier: the nearer side, left on a tie
    ([80.0, 160.0, 0.0, 400.0], [80, 160, 160, 400]),
    ([500.0, 80.0, 160.0], [80, 80, 160]),  # an outlier at the start takes the only neighbour
    ([80.0, 160.0, 240.0, 320.0, 0.0, 0.0, 0.0, 800.0, 880.0], [80, 160, 240, 320, 440, 560, 680, 800, 880]),
    ([80.0, 160.0, 240.0, 0.0, 0.0, 0.0], [80, 160, 240, 240, 240, 240]),  # a long run at the end: copied
    ([80.0, 400.0, 320.0, 160.0, 240.0], [80, 80, 160, 160, 240]),  # two in a row: each the nearer side
])
def test_worked_examples(values, expected):
    assert repair(values) == expected


def test_ties_keep_the_earliest_longest_run():
    # The longest non-decreasing run is 80, 160; 240 is the outlier.
    assert trusted([240.0, 80.0, 160.0]) == [False, True, True]
    # Two runs of equal length (80 | 400, 480 vs 160, 240): the one that ends first wins.
    assert trusted([400.0, 480.0, 160.0, 240.0]) == [True, True, False, False]


@pytest.mark.parametrize("seed", range(40))
def test_repair_matches_the_reference(ref_processor, seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    # A rising sequence with outliers, runs of outliers and plateaus, as a head's argmax gives them.
    classes = np.cumsum(rng.integers(0, 6, n))
    outliers = rng.random(n) < rng.uniform(0.0, 0.5)
    classes[outliers] = rng.integers(0, 5000, int(outliers.sum()))
    values = (classes * 80.0).astype(np.float32)  # the reference gets float32 ms (its argmax times a float)
    ours = repair(values.tolist())
    assert ours == ref_processor.fix_timestamp(values)
    assert all(a <= b for a, b in itertools.pairwise(ours))


def test_unit_times_pair_the_slots():
    assert unit_times([1, 2, 2, 5], 80.0) == [(80, 160), (160, 400)]
    with pytest.raises(ValueError, match="two per unit"):
        unit_times([1, 2, 3], 80.0)


TEXTS = [
    "Hello, world! It's a test.", "  leading and  trailing  ", "a-b c--d e_f", "don't 'quoted' rock'n'roll",
    "naïve café déjà-vu", "数字123和abc混合", "你好，世界！", "Ünïcödé — dash … ellipsis", "e\u0301 combining",
    "emoji 🙂 here 🙂🙂", "tab\tand\nnewline", "!!! ???", "", "x", "３４５ full-width", "Ｈｅｌｌｏ",
    "日本語のテキスト", "한국어 텍스트", "123,456.78", "𠀀𠀁 extension B", "ﬁ ligature", "Ⅻ roman",
    "mixed中文English混合",
]


@pytest.mark.parametrize("text", TEXTS)
def test_units_match_the_reference(ref_processor, text):
    units = split_units(text)
    assert [u.text for u in units] == ref_processor.tokenize_space_lang(text)
    for u in units:  # each unit is the kept characters of its span, which starts and ends on one
        assert u.text == "".join(c for c in text[u.start: u.end] if is_kept(c))
        assert u.text[0] == text[u.start] and u.text[-1] == text[u.end - 1]


# ASCII tokens take split_units' fast path; mixed texts exercise both paths and their joins.
_ALPHABET = "abcXYZ019'-_.,!?\"( )\t\n" + "é中文ü—…ｈ🙂'"


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=_ALPHABET, max_size=40))
def test_units_fast_path_equals_the_character_rule(text):
    assert split_units(text) == split_units_ref(text)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.integers(0, 12), max_size=40))
def test_trusted_equals_its_numpy_form(classes):
    """Small integers: ties and plateaus everywhere (where the tie-breaking decides), in order and out of it."""
    values = [80.0 * c for c in classes]
    assert trusted(values) == trusted_ref(values)
    ordered = sorted(values)
    assert trusted(ordered) == trusted_ref(ordered) == [True] * len(ordered)

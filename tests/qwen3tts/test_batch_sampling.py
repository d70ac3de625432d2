"""The batched sampler (per-row parameters as tensors, no host sync) against the reference's rules: greedy rows
exactly, sampled rows in distribution (each row's own temperature, top-k, top-p), and the codebook-0 rules."""

from __future__ import annotations

import pytest
import torch
from voxgate.engine.qwen3tts.model.sampling import (
    CodebookZeroRules,
    SamplingParams,
    codebook_zero_rules,
    sample_rows,
    top_k_top_p,
)

DRAWS = 20_000


def _reference_probs(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """The reference pick's distribution: temperature, then top-k, then top-p, then softmax."""
    return top_k_top_p(logits[None] / temperature, top_k, top_p).softmax(-1)[0]


@pytest.mark.parametrize("use_top_p", [True, False])
def test_each_row_samples_its_own_distribution(use_top_p: bool) -> None:
    torch.manual_seed(3)
    vocab = 12
    # three parameter sets in one batch, interleaved rows
    params = [(0.9, 5, 1.0), (1.5, 12, 0.7), (0.5, 3, 1.0)]
    if not use_top_p:
        params[1] = (1.5, 12, 1.0)
    base = torch.randn(3, vocab) * 2
    rows = torch.arange(3 * DRAWS) % 3
    logits = base[rows]
    t, k, p = (torch.tensor([params[r][i] for r in rows.tolist()], dtype=torch.float32) for i in range(3))
    ids = sample_rows(logits, t, k, p, torch.ones_like(t), candidates=12, use_top_p=use_top_p)
    for r, (temperature, top_k, top_p) in enumerate(params):
        want = _reference_probs(base[r], temperature, top_k, top_p)
        got = torch.bincount(ids[rows == r], minlength=vocab).float() / DRAWS
        assert (got[want == 0] == 0).all(), f"row set {r} drew an id the reference excludes"
        # 20k draws: a binomial's std is <= 0.0036 per id; 5 sigma
        assert (got - want).abs().max() < 0.018, (r, got, want)


def test_greedy_rows_take_the_first_maximum_beside_sampled_rows() -> None:
    logits = torch.tensor([[0.1, 3.0, 3.0, -1.0], [2.0, 0.0, 1.0, 5.0]])
    one = torch.ones(2)
    ids = sample_rows(logits, one, torch.full((2,), 4.0), one, torch.tensor([0.0, 1.0]), candidates=4)
    assert ids[0] == 1  # first of the tied maxima, like argmax
    assert sample_rows(logits, one, one * 4, one, torch.zeros(2), candidates=4, use_sampling=False).tolist() == [1, 3]


def test_codebook_zero_rules_equal_the_reference_rules() -> None:
    torch.manual_seed(0)
    vocab, eos = 3072, 2150
    rules = CodebookZeroRules(vocab, eos, 1.05)
    logits = torch.randn(4, vocab) * 3
    previous = [torch.randint(0, 2048, (n,)) for n in (0, 1, 5, 40)]  # rows 0 and 1: under the 2-frame EOS block
    seen = torch.zeros(4, vocab, dtype=torch.bool)
    for i, prev in enumerate(previous):
        seen[i, prev] = True
    got = codebook_zero_rules(logits.clone(), seen, torch.full((4,), 1.05), torch.tensor([0, 1, 5, 40]),
                              torch.full((4,), 2.0), eos, rules.suppress)
    for i, prev in enumerate(previous):
        want = rules.apply(logits[i: i + 1].clone(), prev[None])
        assert torch.equal(got[i: i + 1], want)


def test_reference_pick_params_are_the_batched_defaults() -> None:
    """SamplingParams fields line up with the per-row table's columns (param_row)."""
    from voxgate.engine.qwen3tts.model.config import GenerationConfig
    from voxgate.engine.qwen3tts.model.sampling import DO_SAMPLE, SUB_TOP_K, TEMPERATURE, TOP_K, param_row

    gen = GenerationConfig(top_k=0, subtalker_top_k=7)
    row = param_row(gen)
    assert row[TEMPERATURE] == gen.temperature and row[DO_SAMPLE] == 1.0 and row[SUB_TOP_K] == 7
    assert row[TOP_K] >= 1 << 30  # top_k 0: no top-k
    assert SamplingParams(True, 0.9, 50, 1.0).top_k == 50

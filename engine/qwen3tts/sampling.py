"""Codebook sampling rules, in the reference's order and arithmetic (design §5, §6).

All logits are fp32 (the reference casts before any processor). Operations are chosen to round like the reference:
division by the temperature and by the penalty, `<` against the k-th value for top-k, and one multinomial draw per
decision from the caller's generator, so a seeded run reproduces the reference's draws.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True, slots=True)
class SamplingParams:
    do_sample: bool
    temperature: float
    top_k: int
    top_p: float


def repetition_penalty_(logits: torch.Tensor, previous: torch.Tensor, penalty: float) -> torch.Tensor:
    """logits [B, V]; previous [B, N] ids already generated (duplicates fine). Positive logits / p, others * p."""
    if penalty == 1.0 or previous.numel() == 0:
        return logits
    picked = logits.gather(1, previous)
    picked = torch.where(picked < 0, picked * penalty, picked / penalty)
    return logits.scatter_(1, previous, picked)


def top_k_top_p(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    if top_k > 0:
        k = min(top_k, logits.shape[-1])
        kth = torch.topk(logits, k)[0][..., -1, None]
        logits = logits.masked_fill(logits < kth, float("-inf"))  # ties with the k-th value survive
    if top_p < 1.0:
        sorted_logits, sorted_idx = torch.sort(logits, descending=False)
        cum = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        remove_sorted = cum <= (1 - top_p)
        remove_sorted[..., -1:] = False  # always keep the most likely token
        remove = remove_sorted.scatter(1, sorted_idx, remove_sorted)
        logits = logits.masked_fill(remove, float("-inf"))
    return logits


def pick(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None) -> torch.Tensor:
    """fp32 logits [B, V] -> ids [B] (greedy: first maximum)."""
    if not params.do_sample:
        return logits.argmax(dim=-1)
    logits = top_k_top_p(logits / params.temperature, params.top_k, params.top_p)
    probs = logits.softmax(dim=-1)
    return torch.multinomial(probs, num_samples=1, generator=generator).squeeze(1)


class CodebookZeroRules:
    """Talker-side logit processing: repetition penalty, the first-two-frames EOS block, special-id suppression."""

    def __init__(self, vocab_size: int, eos_id: int, penalty: float, min_new_tokens: int = 2,
                 num_specials: int = 1024) -> None:
        self.eos_id = eos_id
        self.penalty = penalty
        self.min_new_tokens = min_new_tokens
        suppress = torch.zeros(vocab_size, dtype=torch.bool)
        suppress[vocab_size - num_specials:] = True  # 2048..3071: language, control and speaker rows
        suppress[eos_id] = False
        self.suppress = suppress

    def apply(self, logits: torch.Tensor, previous: torch.Tensor) -> torch.Tensor:
        """logits [B, V] fp32 (modified in place), previous [B, N] codebook-0 ids generated so far."""
        logits = repetition_penalty_(logits, previous, self.penalty)
        if previous.shape[1] < self.min_new_tokens:
            logits[:, self.eos_id] = float("-inf")
        if self.suppress.device != logits.device:
            self.suppress = self.suppress.to(logits.device)
        return logits.masked_fill_(self.suppress, float("-inf"))

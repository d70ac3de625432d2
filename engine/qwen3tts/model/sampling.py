"""Codebook sampling rules, in the reference's order and arithmetic (design §5, §6).

All logits are fp32 (the reference casts before any processor). Operations are chosen to round like the reference:
division by the temperature and by the penalty, `<` against the k-th value for top-k, and one multinomial draw per
decision from the caller's generator, so a seeded run reproduces the reference's draws.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .config import GenerationConfig


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


# -- batched: one row per stream, each with its own parameters (tensors), no host sync (CUDA-graph safe) -----------

# Columns of the per-slot parameter table [slots, NUM_PARAMS] float32 (engine/qwen3tts/runner.py).
TEMPERATURE, TOP_K, TOP_P, DO_SAMPLE, PENALTY, MIN_NEW = 0, 1, 2, 3, 4, 5  # codebook 0 (the Talker)
SUB_TEMPERATURE, SUB_TOP_K, SUB_TOP_P, SUB_DO_SAMPLE = 6, 7, 8, 9  # codebooks 1..15 (the code predictor)
NUM_PARAMS = 10


def param_row(gen: GenerationConfig, min_new_tokens: int = 2) -> list[float]:
    """One stream's row of the parameter table from its generation settings."""
    row = [0.0] * NUM_PARAMS
    no_limit = float(1 << 30)  # top_k 0 means no top-k
    row[TEMPERATURE], row[TOP_K], row[TOP_P] = gen.temperature, gen.top_k or no_limit, gen.top_p
    row[DO_SAMPLE], row[PENALTY], row[MIN_NEW] = float(gen.do_sample), gen.repetition_penalty, min_new_tokens
    row[SUB_TEMPERATURE], row[SUB_TOP_K], row[SUB_TOP_P] = gen.subtalker_temperature, \
        gen.subtalker_top_k or no_limit, gen.subtalker_top_p
    row[SUB_DO_SAMPLE] = float(gen.subtalker_dosample)
    return row


def codebook_zero_rules(logits: torch.Tensor, seen: torch.Tensor, penalty: torch.Tensor, num_frames: torch.Tensor,
                        min_new: torch.Tensor, eos_id: int, suppress: torch.Tensor) -> torch.Tensor:
    """CodebookZeroRules.apply per row: logits [R, V] fp32, seen [R, V] bool (codebook-0 ids generated so far),
    penalty/min_new [R] float, num_frames [R] int. Penalty over each seen id once (as the reference's gather and
    scatter over a list with duplicates), EOS blocked below min_new frames, specials other than EOS suppressed."""
    pen = penalty[:, None]
    logits = torch.where(seen, torch.where(logits < 0, logits * pen, logits / pen), logits)
    block = (num_frames.to(min_new.dtype) < min_new)[:, None] & (torch.arange(logits.shape[1], device=logits.device)
                                                                == eos_id)[None, :]
    return logits.masked_fill(block | suppress[None, :], float("-inf"))


def sample_rows(logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                do_sample: torch.Tensor, candidates: int, use_top_p: bool = True,
                use_sampling: bool = True) -> torch.Tensor:
    """`pick` per row: fp32 logits [R, V] and per-row parameters [R] -> ids [R].

    Greedy rows take the first maximum. Sampled rows: temperature, top-k (k <= `candidates`, the static width of
    one topk over all rows), top-p over what top-k left, then one draw by the Gumbel-max race (argmax of
    logit/T - log E with E ~ Exp(1) picks i with probability softmax_i): the reference's distribution without its
    host sync. A seeded run therefore does not reproduce the reference's draws; greedy runs are exact.

    use_top_p / use_sampling: static switches for what no row of this engine can need (its generation settings
    have top_p = 1 / no sampling): the ops are left out of the captured step.
    """
    greedy = logits.argmax(dim=-1)
    if not use_sampling:
        return greedy
    k = min(candidates, logits.shape[-1])
    values, index = logits.topk(k, dim=-1)  # sorted, largest first; dividing by T > 0 keeps the order
    values = values / temperature.clamp(min=1e-5)[:, None]
    ranks = torch.arange(k, device=logits.device)[None, :]
    values = values.masked_fill(ranks >= top_k.clamp(min=1)[:, None], float("-inf"))
    if use_top_p:  # keep a token while the mass before it is below top_p (the first always; top_p >= 1 keeps all)
        probs = values.softmax(dim=-1)
        before = probs.cumsum(dim=-1) - probs
        values = values.masked_fill((before >= top_p[:, None]) & (top_p[:, None] < 1.0), float("-inf"))
    race = values - torch.empty_like(values).exponential_().log()
    sampled = index.gather(1, race.argmax(dim=-1, keepdim=True)).squeeze(1)
    return torch.where(do_sample > 0, sampled, greedy)

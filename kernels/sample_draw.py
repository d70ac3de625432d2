"""One codebook's draw for every row in one launch: greedy rows take the first maximum; sampled rows keep their
top-k logits, divide by their temperature and race them against Exp(1) noise (argmax of logit/T - log E picks id i
with probability softmax_i over the kept ids: the Gumbel-max draw). PyTorch spends ~12 launches on this (argmax,
topk, divide, mask, exponential, log, argmax, gather, where, ...) 16 times a frame.

The k-th largest logit is found without sorting: logits map to integers of the same order, and a 32-step binary
search over that integer range counts how many are at or above the midpoint, so the threshold is exact. Ids tied
with the k-th value are all kept (torch.topk would keep some of them). The noise is an input, one Exp(1) value per
(row, id), so the draw is a pure function and tests compare it with its reference exactly; the engine fills it once
a step. The logits may be the head's 16-bit output, widened to fp32 as they load (exact): the engine's depth loop
launches no cast of its own for them. top-p is not here: rows that need it take the PyTorch path
(engine/qwen3tts/model/sampling.py).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .utils import MAX, MIN, SUM

# 16-bit logits are widened to fp32 in the kernel (exact), so the engine's head need not launch a cast first
LOGIT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


@triton.jit
def _first_argmax(x, i, BLOCK_V: tl.constexpr):
    # tl.argmax is a library jit function, which the interpreter cannot call from here: the max, then its first index
    top = tl.reduce(x, 0, MAX)
    return tl.reduce(tl.where(x == top, i, BLOCK_V), 0, MIN)


@triton.jit
def _sample_draw_kernel(logits_ptr, noise_ptr, params_ptr, out_ptr, V, num_params, col_temperature, col_top_k,
                        col_do_sample, candidates, BLOCK_V: tl.constexpr):
    # logits [R, V] fp32 or 16-bit, noise [R, V] fp32, both contiguous; params [R, num_params] fp32 contiguous (a
    # row's temperature, top_k and do_sample in the given columns); out [R] int64. grid: R, one row per program.
    row = tl.program_id(0).to(tl.int64)
    i = tl.arange(0, BLOCK_V)
    ok = i < V
    logit = tl.load(logits_ptr + row * V + i, mask=ok, other=float("-inf")).to(tl.float32)
    greedy = _first_argmax(logit, i, BLOCK_V)
    param = params_ptr + row * num_params
    if tl.load(param + col_do_sample) > 0:
        k = tl.minimum(tl.maximum(tl.load(param + col_top_k), 1.0), 1.0 * candidates).to(tl.int32)
        k = tl.minimum(k, V)
        bits = logit.to(tl.int32, bitcast=True)
        key = tl.where(bits >= 0, bits, bits ^ 0x7FFFFFFF).to(tl.int64)  # same order as the floats
        key = tl.where(ok, key, -(1 << 40))
        lo = tl.full((), -(1 << 31), tl.int64)
        hi = tl.full((), (1 << 31) - 1, tl.int64)
        for _ in range(32):  # the largest t with at least k keys >= t: the k-th largest key
            mid = (lo + hi + 1) // 2
            count = tl.reduce((key >= mid).to(tl.int32), 0, SUM)
            above = count >= k
            lo = tl.where(above, mid, lo)
            hi = tl.where(above, hi, mid - 1)
        temperature = tl.maximum(tl.load(param + col_temperature), 1e-5)
        noise = tl.load(noise_ptr + row * V + i, mask=ok, other=1.0)
        race = tl.where(key >= lo, logit / temperature - tl.log(noise), float("-inf"))
        tl.store(out_ptr + row, _first_argmax(race, i, BLOCK_V).to(tl.int64))
    else:
        tl.store(out_ptr + row, greedy.to(tl.int64))


def _check(logits: torch.Tensor, noise: torch.Tensor, params: torch.Tensor, columns: tuple[int, int, int]) -> None:
    assert logits.dim() == 2 and logits.dtype in LOGIT_DTYPES and logits.is_contiguous(), (logits.shape, logits.dtype)
    assert noise.shape == logits.shape and noise.dtype == torch.float32 and noise.is_contiguous(), noise.shape
    assert params.dim() == 2 and params.shape[0] == logits.shape[0] and params.dtype == torch.float32, params.shape
    assert params.is_contiguous() and all(0 <= c < params.shape[1] for c in columns), (params.stride(), columns)


def sample_draw(logits: torch.Tensor, noise: torch.Tensor, params: torch.Tensor, columns: tuple[int, int, int],
                candidates: int) -> torch.Tensor:
    """Logits [R, V] (fp32, or 16-bit: read as fp32, exactly; -inf where masked), Exp(1) noise [R, V] fp32, the
    rows' parameter table [R, P] fp32 with `columns` = (temperature, top_k, do_sample), `candidates` the widest top-k
    any row may have -> ids [R] int64."""
    _check(logits, noise, params, columns)
    rows, vocab = logits.shape
    out = torch.empty(rows, dtype=torch.int64, device=logits.device)
    if rows == 0:
        return out
    _sample_draw_kernel[(rows,)](logits, noise, params, out, vocab, params.shape[1], *columns,
                                 min(candidates, vocab), BLOCK_V=triton.next_power_of_2(vocab), num_warps=4)
    return out


def sample_draw_ref(logits: torch.Tensor, noise: torch.Tensor, params: torch.Tensor, columns: tuple[int, int, int],
                    candidates: int) -> torch.Tensor:
    """The same in plain PyTorch: the k-th largest logit by a sort, the same race (in fp32, as the kernel)."""
    _check(logits, noise, params, columns)
    logits = logits.float()
    temperature, top_k, do_sample = (params[:, c] for c in columns)
    vocab = logits.shape[1]
    greedy = logits.argmax(dim=-1)
    k = top_k.clamp(min=1).clamp(max=min(candidates, vocab)).long()
    kth = logits.sort(dim=-1, descending=True).values.gather(1, (k - 1)[:, None])
    scaled = logits / temperature.clamp(min=1e-5)[:, None] - noise.log()
    race = torch.where(logits >= kth, scaled, float("-inf"))
    return torch.where(do_sample > 0, race.argmax(dim=-1), greedy)

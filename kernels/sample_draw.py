"""One codebook's draw for every row in one launch: greedy rows take the first maximum; sampled rows keep their
top-k logits, divide by their temperature and race them against Exp(1) noise (argmax of logit/T - log E picks id i
with probability softmax_i over the kept ids: the Gumbel-max draw). PyTorch spends ~12 launches on this (argmax,
topk, divide, mask, exponential, log, argmax, gather, where, ...) 16 times a frame.

The k-th largest logit is found without sorting: logits map to int32 keys of the same order, and a search over
that integer range counts how many keys are at or above each probe, so the threshold is exact. Each step tries
`ways` - 1 evenly spaced probes at once (one reduction for all of them), narrowing the range `ways`-fold: 2 is a
binary search (32 steps of one probe, each a chain of CTA-wide reductions), 16 ways take 8 steps of 15 probes. 4
ways (16 steps of 3 probes) is the fastest measured on the H200 (one kernel in a CUDA graph, 1 to 128 rows:
10.7-11.0 us at vocab 2048 and 15.8-16.4 at 3072, against 13.6-14.1 / 18.7-19.1 for 2 ways, 13.3-13.8 /
21.9-23.0 for 16; docs/benchmarks/h200-step-profile/README.md), so it is the default; its `gpu` tests pass on an
H100 and every fan-out equals the reference to the last bit in the interpreter. Ids tied with
the k-th value are all kept (torch.topk would keep some of them; -0 and +0 are two values here). The noise is an
input, one Exp(1) value per (row, id), so the draw is a pure function and tests compare it with its reference
exactly; the engine fills it once a step. The logits may be the head's 16-bit output, widened to fp32 as they load
(exact): the engine's depth loop launches no cast of its own for them. top-p is not here: rows that need it take
the PyTorch path (engine/qwen3tts/model/sampling.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from .utils import MAX, MIN, SUM, pdl_launch, wait_for_inputs

# 16-bit logits are widened to fp32 in the kernel (exact), so the engine's head need not launch a cast first
LOGIT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
WAYS = 4  # the threshold search's fan-out a step (module docstring)


@triton.jit
def _first_argmax(x, i, BLOCK_V: tl.constexpr):
    # tl.argmax is a library jit function, which the interpreter cannot call from here: the max, then its first index
    top = tl.reduce(x, 0, MAX)
    return tl.reduce(tl.where(x == top, i, BLOCK_V), 0, MIN)


@triton.jit
def _sample_draw_kernel(logits_ptr, noise_ptr, params_ptr, out_ptr, table_ptr, rows_ptr, seen_ptr, slots_ptr,
                        frames_ptr, suppress_ptr, V, H, num_params, col_temperature, col_top_k, col_do_sample,
                        col_penalty, col_min_new, eos_id, candidates, BLOCK_V: tl.constexpr, WAYS: tl.constexpr,
                        STEPS: tl.constexpr, GATHER: tl.constexpr, BLOCK_H: tl.constexpr, RULES: tl.constexpr,
                        PDL: tl.constexpr):
    # logits [R, V] fp32 or 16-bit, noise [R, V] fp32, both contiguous; params [R, num_params] fp32 contiguous (a
    # row's temperature, top_k and do_sample in the given columns); out [R] int64. grid: R, one row per program.
    # WAYS: the search's fan-out a step (a power of two), STEPS: enough steps to narrow 2^32 keys to one.
    # GATHER: also rows [R, H] = table [V', H] at the drawn id (the next pass's input: no lookup launch of its own).
    # RULES (codebook 0): first the repetition penalty over the ids seen [S, V] (bool, row slots[r]) so far, EOS
    # blocked while frames[r] < the row's min_new, the suppressed ids [V] (bool) at -inf, as codebook_zero_rules
    # does in fp32; after the draw the drawn id is marked seen. PDL: the next kernel may start (its weights
    # loading) while this one draws; this one waits for the kernel ahead before it reads anything.
    row = tl.program_id(0).to(tl.int64)
    i = tl.arange(0, BLOCK_V)
    ok = i < V
    wait_for_inputs(PDL)
    logit = tl.load(logits_ptr + row * V + i, mask=ok, other=float("-inf")).to(tl.float32)
    param = params_ptr + row * num_params
    if RULES:
        seen_row = seen_ptr + tl.load(slots_ptr + row) * V
        pen = tl.load(param + col_penalty)
        pen = tl.where(pen > 0, pen, 1.0)  # <= 0 only on padding rows (zeroed parameters): no penalty, no inf * 0
        seen = tl.load(seen_row + i, mask=ok, other=0) != 0
        logit = tl.where(seen, tl.where(logit < 0, logit * pen, logit / pen), logit)
        early = (tl.load(frames_ptr + row).to(tl.float32) < tl.load(param + col_min_new)).to(tl.int32)
        blocked = (tl.load(suppress_ptr + i, mask=ok, other=0) != 0) | ((i == eos_id).to(tl.int32) * early != 0)
        logit = tl.where(blocked, float("-inf"), logit)
    greedy = _first_argmax(logit, i, BLOCK_V)
    if tl.load(param + col_do_sample) > 0:
        k = tl.minimum(tl.maximum(tl.load(param + col_top_k), 1.0), 1.0 * candidates).to(tl.int32)
        k = tl.minimum(k, V)
        bits = logit.to(tl.int32, bitcast=True)
        key = tl.where(bits >= 0, bits, bits ^ 0x7FFFFFFF)  # same order as the floats
        # past V: the lowest key, below every probe (probes start above lo = the lowest key)
        key = tl.where(ok, key, -(1 << 31))
        # the largest t with at least k keys >= t (the k-th largest key), within [lo, hi]: at least k keys are
        # >= lo throughout; each step counts the keys >= each probe lo + n step (n = 1..WAYS-1; n = WAYS lies
        # past hi), moves lo to the last probe that holds k and hi below the first that does not
        lo = tl.full((), -(1 << 31), tl.int64)
        hi = tl.full((), (1 << 31) - 1, tl.int64)
        nth = (tl.arange(0, WAYS) + 1).to(tl.int64)
        for _ in range(STEPS):
            step = (hi - lo) // WAYS + 1
            probes = lo + nth * step
            inside = probes <= hi
            probe = tl.where(inside, probes, hi).to(tl.int32)
            count = tl.reduce((key[None, :] >= probe[:, None]).to(tl.int32), 1, SUM)
            held = tl.reduce(((count >= k) & inside).to(tl.int64), 0, SUM)  # the held probes come first
            hi = tl.minimum(hi, lo + (held + 1) * step - 1)
            lo = lo + held * step
        temperature = tl.maximum(tl.load(param + col_temperature), 1e-5)
        noise = tl.load(noise_ptr + row * V + i, mask=ok, other=1.0)
        race = tl.where(key >= lo, logit / temperature - tl.log(noise), float("-inf"))
        drawn = _first_argmax(race, i, BLOCK_V)
    else:
        drawn = greedy
    tl.store(out_ptr + row, drawn.to(tl.int64))
    if RULES:
        tl.store(seen_row + drawn, (drawn * 0 + 1).to(seen_ptr.dtype.element_ty))
    if GATHER:
        h = tl.arange(0, BLOCK_H)
        at = drawn.to(tl.int64) * H
        tl.store(rows_ptr + row * H + h, tl.load(table_ptr + at + h, mask=h < H), mask=h < H)


def _check(logits: torch.Tensor, noise: torch.Tensor, params: torch.Tensor, columns: tuple[int, int, int]) -> None:
    assert logits.dim() == 2 and logits.dtype in LOGIT_DTYPES and logits.is_contiguous(), (logits.shape, logits.dtype)
    assert noise.shape == logits.shape and noise.dtype == torch.float32 and noise.is_contiguous(), noise.shape
    assert params.dim() == 2 and params.shape[0] == logits.shape[0] and params.dtype == torch.float32, params.shape
    assert params.is_contiguous() and all(0 <= c < params.shape[1] for c in columns), (params.stride(), columns)


@dataclass(frozen=True)
class ZeroRules:
    """Codebook 0's rules (engine/qwen3tts/model/sampling.py's codebook_zero_rules) for the draw to apply first:
    `seen` [S, V] bool, each row's ids so far by slot (the drawn id is marked in it), `slots` [R] int64, `frames`
    [R] int64 (frames made so far), the params columns of the repetition penalty and of min_new, the EOS id, and
    `suppress` [V] bool. A penalty <= 0 (a padding row's zeroed parameters) counts as none."""

    seen: torch.Tensor
    slots: torch.Tensor
    frames: torch.Tensor
    penalty_column: int
    min_new_column: int
    eos_id: int
    suppress: torch.Tensor


def sample_draw(logits: torch.Tensor, noise: torch.Tensor, params: torch.Tensor, columns: tuple[int, int, int],
                candidates: int, ways: int = WAYS, table: torch.Tensor | None = None,
                rows_out: torch.Tensor | None = None, rules: ZeroRules | None = None,
                pdl: bool | str = False) -> torch.Tensor:
    """Logits [R, V] (fp32, or 16-bit: read as fp32, exactly; -inf where masked), Exp(1) noise [R, V] fp32, the
    rows' parameter table [R, P] fp32 with `columns` = (temperature, top_k, do_sample), `candidates` the widest top-k
    any row may have -> ids [R] int64. ways: the threshold search's fan-out a step (a power of two >= 2; 2 is a
    binary search); every fan-out finds the same threshold. With `table` [V', H] (V' >= V) and `rows_out` [R, H]
    (both contiguous, one dtype), rows_out also receives table[ids] (an embedding lookup in the same launch). With
    `rules`, codebook 0's rules apply to the logits first and the drawn ids are marked seen (ZeroRules). `pdl`:
    launched with programmatic dependent launch (kernels/utils.py), so that the next kernel's weights stream in
    while the rows draw."""
    assert ways >= 2 and ways & (ways - 1) == 0, ways
    _check(logits, noise, params, columns)
    _check_gather(logits, table, rows_out)
    _check_rules(logits, params, rules)
    rows, vocab = logits.shape
    out = torch.empty(rows, dtype=torch.int64, device=logits.device)
    if rows == 0:
        return out
    width = table.shape[1] if table is not None else 1
    r = rules
    on, extra = pdl_launch(_sample_draw_kernel, pdl)
    _sample_draw_kernel[(rows,)](
        logits, noise, params, out, table if table is not None else out, rows_out if rows_out is not None else out,
        r.seen if r else out, r.slots if r else out, r.frames if r else out, r.suppress if r else out, vocab, width,
        params.shape[1], *columns, r.penalty_column if r else 0, r.min_new_column if r else 0, r.eos_id if r else 0,
        min(candidates, vocab), BLOCK_V=triton.next_power_of_2(vocab), WAYS=ways,
        STEPS=-(-32 // (ways.bit_length() - 1)), GATHER=table is not None, BLOCK_H=triton.next_power_of_2(width),
        RULES=r is not None, PDL=on, num_warps=4, **extra)
    return out


def _check_rules(logits: torch.Tensor, params: torch.Tensor, rules: ZeroRules | None) -> None:
    if rules is None:
        return
    rows, vocab = logits.shape
    assert rules.seen.dim() == 2 and rules.seen.shape[1] == vocab and rules.seen.dtype == torch.bool, rules.seen.shape
    assert rules.seen.is_contiguous() and rules.suppress.shape == (vocab,) and rules.suppress.dtype == torch.bool
    assert rules.slots.shape == rules.frames.shape == (rows,), (rules.slots.shape, rules.frames.shape)
    assert rules.slots.dtype == rules.frames.dtype == torch.int64, (rules.slots.dtype, rules.frames.dtype)
    assert all(0 <= c < params.shape[1] for c in (rules.penalty_column, rules.min_new_column)), params.shape


def _check_gather(logits: torch.Tensor, table: torch.Tensor | None, rows_out: torch.Tensor | None) -> None:
    assert (table is None) == (rows_out is None), "table and rows_out come together"
    if table is not None:
        assert table.dim() == 2 and table.is_contiguous() and table.shape[0] >= logits.shape[1], table.shape
        assert rows_out.shape == (logits.shape[0], table.shape[1]) and rows_out.dtype == table.dtype, rows_out.shape
        assert rows_out.is_contiguous(), rows_out.stride()


def sample_draw_ref(logits: torch.Tensor, noise: torch.Tensor, params: torch.Tensor, columns: tuple[int, int, int],
                    candidates: int, table: torch.Tensor | None = None, rows_out: torch.Tensor | None = None,
                    rules: ZeroRules | None = None, pdl: bool | str = False) -> torch.Tensor:
    """The same in plain PyTorch: the k-th largest logit by a sort, the same race (in fp32, as the kernel); with
    `table`, rows_out = F.embedding(ids, table); with `rules`, codebook_zero_rules first and the ids marked seen;
    `pdl` is ignored."""
    _check(logits, noise, params, columns)
    _check_gather(logits, table, rows_out)
    _check_rules(logits, params, rules)
    if rules is not None:  # the engine's codebook_zero_rules, in fp32 (its tests hold the two equal)
        r = rules
        logits, seen, pen = logits.float(), r.seen[r.slots], params[:, r.penalty_column, None]
        pen = torch.where(pen > 0, pen, 1.0)  # as the kernel: a padding row's zeroed penalty is none
        logits = torch.where(seen, torch.where(logits < 0, logits * pen, logits / pen), logits)
        early = (r.frames.float() < params[:, r.min_new_column])[:, None]
        eos = torch.arange(logits.shape[1], device=logits.device) == r.eos_id
        logits = logits.masked_fill(r.suppress[None, :] | (early & eos[None, :]), float("-inf"))
    ids = _draw_ref(logits, noise, params, columns, candidates)
    if rules is not None:
        rules.seen.index_put_((rules.slots, ids), torch.ones_like(ids, dtype=torch.bool))
    if table is not None:
        rows_out.copy_(torch.nn.functional.embedding(ids, table))
    return ids


def _draw_ref(logits: torch.Tensor, noise: torch.Tensor, params: torch.Tensor, columns: tuple[int, int, int],
              candidates: int) -> torch.Tensor:
    logits = logits.float()
    temperature, top_k, do_sample = (params[:, c] for c in columns)
    vocab = logits.shape[1]
    greedy = logits.argmax(dim=-1)
    k = top_k.clamp(min=1).clamp(max=min(candidates, vocab)).long()
    kth = logits.sort(dim=-1, descending=True).values.gather(1, (k - 1)[:, None])
    scaled = logits / temperature.clamp(min=1e-5)[:, None] - noise.log()
    race = torch.where(logits >= kth, scaled, float("-inf"))
    return torch.where(do_sample > 0, race.argmax(dim=-1), greedy)

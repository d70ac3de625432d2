"""kernels/sample_draw.py (one codebook's greedy or top-k draw for every row) against its PyTorch reference, id for
id, and its draws' frequencies against softmax and the engine's sampler (Triton's interpreter without a GPU)."""

from __future__ import annotations

from types import ModuleType

import pytest
import torch

pytest.importorskip("triton")

from kernel_cases import ROWS
from triton_mode import DEVICE, kernel_module


@pytest.fixture(scope="module")
def draw() -> ModuleType:
    return kernel_module("sample_draw")


def _draw_inputs(rows: int, vocab: int, ties: bool = False):
    logits = torch.randn(rows, vocab, device=DEVICE) * 3
    if ties:  # rounded logits: many equal values, the k-th among them
        logits = logits.round()
    logits[:, vocab // 3] = float("-inf")  # a suppressed id
    noise = torch.empty(rows, vocab, device=DEVICE).exponential_()
    temperature = torch.rand(rows, device=DEVICE) + 0.3
    top_k = torch.randint(1, vocab + 5, (rows,), device=DEVICE).float()
    top_k[::4] = float(1 << 30)  # no top-k
    do_sample = (torch.rand(rows, device=DEVICE) < 0.7).float()
    # a parameter table as the engine's: other columns around the three
    params = torch.stack([torch.rand(rows, device=DEVICE), temperature, top_k, torch.rand(rows, device=DEVICE),
                          do_sample], dim=1)
    return logits, noise, params, (1, 2, 4)


@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("vocab", [50, 2048] + ([3072] if DEVICE == "cuda" else []))
@pytest.mark.parametrize("ties", [False, True])
def test_sample_draw(draw: ModuleType, rows: int, vocab: int, ties: bool) -> None:
    args = _draw_inputs(rows, vocab, ties)
    candidates = vocab if ties else 40
    got = draw.sample_draw(*args, candidates)
    want = draw.sample_draw_ref(*args, candidates)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    logits, _, params, _ = args
    greedy = params[:, 4] == 0
    assert torch.equal(got[greedy], logits[greedy].argmax(-1))
    assert torch.isfinite(logits.gather(1, got[:, None])).all()  # never a suppressed id


@pytest.mark.parametrize("ties", [False, True])
def test_every_fan_out_of_the_search_finds_the_same_threshold(draw: ModuleType, ties: bool) -> None:
    """The threshold search's fan-out (2: a binary search, up to 64 probes a step, 32 not dividing the key's 32
    bits evenly) changes how it narrows, not what it finds: the same ids, the reference's, on logits whose
    k-th values fall anywhere (every top-k from 1 to the vocabulary)."""
    logits, noise, params, columns = _draw_inputs(67, 300, ties)
    params[:, 2] = torch.arange(1, 68, device=DEVICE).float() * 300 // 67
    params[:, 4] = 1.0  # every row samples
    want = draw.sample_draw_ref(logits, noise, params, columns, 300)
    for ways in (2, 4, 16, 32, 64):
        assert torch.equal(draw.sample_draw(logits, noise, params, columns, 300, ways=ways), want), ways


@pytest.mark.parametrize("ways", [2, 16, 32])
def test_the_threshold_is_the_kth_largest_logit_to_the_last_bit(draw: ModuleType, ways: int) -> None:
    """Logits that are consecutive floats (their keys consecutive integers: around 1.0, the positive and the
    negative subnormals, the largest finite magnitudes; not -0 and +0 together, equal as floats, two keys here),
    so a threshold one key off keeps or drops one more id; the id that would then win has its noise near zero (its
    race ~69 ahead). A row whose tiny-noise id is the (k+1)-th largest must not draw it, and draws among its top k;
    one whose tiny-noise id is the k-th must draw it where ~69 outweighs the logits' own spacing (not at the
    largest magnitudes). Rows of normal floats equal the reference id for id; subnormal logits may flush to zero in
    a compiled kernel's race (a tie there), which changes no kept set, so those rows are held by the checks above."""
    vocab, per_base = 96, 16
    bases = [0x3F800000, 0x7F7FFFFF - vocab, -0x7F7FFFFF, 1, -vocab - 1]  # normal floats first, then subnormals
    rows = len(bases) * per_base
    gen = torch.Generator().manual_seed(ways)
    keys = torch.stack([base + torch.randperm(vocab, generator=gen) for base in bases for _ in range(per_base)])
    bits = torch.where(keys >= 0, keys, keys ^ 0x7FFFFFFF).to(torch.int32)
    logits = bits.view(torch.float32)
    k = torch.randint(1, vocab, (rows,), generator=gen)
    order = logits.argsort(dim=1, descending=True)
    kth = order.gather(1, torch.stack([k - 1, k], dim=1))  # the ids of ranks k and k + 1
    hit_kth = torch.arange(rows) % 2 == 0
    tiny = torch.where(hit_kth, kth[:, 0], kth[:, 1])
    noise = torch.ones(rows, vocab)
    noise[torch.arange(rows), tiny] = 1e-30
    params = torch.stack([torch.ones(rows), k.float(), torch.ones(rows)], dim=1)
    args = (logits.to(DEVICE), noise.to(DEVICE), params.to(DEVICE), (0, 1, 2), vocab)
    got = draw.sample_draw(*args, ways=ways).cpu()
    rank = (order == got[:, None]).int().argmax(dim=1)  # 0: the largest logit
    assert bool((rank < k).all()), "an id outside its row's top k was drawn"
    assert not bool((got == tiny)[~hit_kth].any()), "the (k+1)-th logit was kept"
    moderate = torch.arange(rows) < per_base  # around 1.0: ~69 outweighs the logits' own spacing
    assert torch.equal(got[hit_kth & moderate], tiny[hit_kth & moderate]), "the k-th logit was dropped"
    normal = torch.arange(rows) < 3 * per_base
    assert torch.equal(got[normal], draw.sample_draw_ref(*args).cpu()[normal])


@pytest.mark.parametrize("rows", [1, 3, 17])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_sample_draw_of_16_bit_logits_is_the_draw_of_their_fp32_values(draw: ModuleType, rows: int,
                                                                       dtype: torch.dtype) -> None:
    """The head's own 16-bit logits (no cast launched before the draw) give the ids their fp32 copy gives, id for
    id, in the kernel and in the reference."""
    logits, noise, params, columns = _draw_inputs(rows, 2048, ties=False)
    low = logits.to(dtype)  # rounding makes ties too: the k-th value among equal logits
    want = draw.sample_draw_ref(low.float(), noise, params, columns, 40)
    assert torch.equal(draw.sample_draw(low, noise, params, columns, 40), want)
    assert torch.equal(draw.sample_draw_ref(low, noise, params, columns, 40), want)


def test_sample_draw_matches_the_engines_distribution(draw: ModuleType) -> None:
    """The draw's frequencies against softmax(top-k logits / T), and the engine's PyTorch sampler's, over 4,000 rows
    of one distribution (independent noise per row). Interpreted, 4,000 programs take a minute: the reference
    stands in there (test_sample_draw holds the kernel to it id for id)."""
    from voxgate.engine.qwen3tts.model.sampling import sample_rows

    rows, vocab, k, temperature = 4000, 12, 5, 0.8
    logits = torch.linspace(2.0, -1.0, vocab, device=DEVICE)[torch.randperm(vocab, device=DEVICE)]
    logits = logits.expand(rows, vocab).contiguous()
    params = torch.tensor([temperature, k, 1.0], device=DEVICE).expand(rows, 3).contiguous()
    noise = torch.empty(rows, vocab, device=DEVICE).exponential_()
    fn = draw.sample_draw if DEVICE == "cuda" else draw.sample_draw_ref
    ours = fn(logits, noise, params, (0, 1, 2), 50)
    engine = sample_rows(logits, params[:, 0], params[:, 1], torch.ones(rows, device=DEVICE), params[:, 2], 50)
    top = logits[0].topk(k).indices
    expected = torch.zeros(vocab, device=DEVICE)
    expected[top] = (logits[0, top] / temperature).softmax(-1)
    for ids in (ours, engine):
        freq = torch.bincount(ids, minlength=vocab).float() / rows
        assert freq[expected == 0].sum() == 0
        # 4,000 draws: a frequency's standard error is at most 0.008; 4 of them
        assert (freq - expected).abs().max() < 0.032, (freq, expected)


@pytest.mark.parametrize("rows", [1, 5, 16])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_the_draw_writes_the_drawn_ids_table_rows(draw: ModuleType, rows: int, dtype: torch.dtype) -> None:
    """With a table (the depth loop's next-pass input, one launch fewer a pass), the same ids as without it and
    rows_out equal to table[ids] bit for bit, greedy and sampled rows alike; the table may be longer than the
    vocabulary and its rows of any width (here not a power of two)."""
    logits, noise, params, cols = _draw_inputs(rows, 200)
    table = torch.randn(230, 96, device=DEVICE).to(dtype)
    rows_out = torch.full((rows, 96), float("nan"), device=DEVICE).to(dtype)
    ids = draw.sample_draw(logits, noise, params, cols, 64, table=table, rows_out=rows_out)
    assert torch.equal(ids, draw.sample_draw(logits, noise, params, cols, 64))
    assert torch.equal(ids, draw.sample_draw_ref(logits, noise, params, cols, 64))
    assert torch.equal(rows_out, table[ids])
    want = torch.empty_like(rows_out)
    assert torch.equal(draw.sample_draw_ref(logits, noise, params, cols, 64, table=table, rows_out=want), ids)
    assert torch.equal(want, rows_out)
    with pytest.raises(AssertionError, match="together"):
        draw.sample_draw(logits, noise, params, cols, 64, table=table)


@pytest.mark.parametrize("rows", [1, 6])
def test_the_draw_applies_codebook_zeros_rules_and_marks_the_id_seen(draw: ModuleType, rows: int) -> None:
    """With ZeroRules (codebook 0: the repetition penalty over each row's seen ids, EOS blocked below min_new
    frames, suppressed ids), the kernel draws what the engine's codebook_zero_rules then the plain draw give, takes
    16-bit logits as they are, writes the drawn ids' table rows, and marks each drawn id seen in its slot's row
    (the other slots untouched); the reference does the same."""
    from voxgate.engine.qwen3tts.model.sampling import codebook_zero_rules

    vocab, slots_total, eos = 300, 9, 7
    logits, noise, params, cols = _draw_inputs(rows, vocab)
    logits = logits.to(torch.bfloat16)
    params = torch.cat([params, torch.rand(rows, 2, device=DEVICE) * 2 + 0.5], dim=1)  # penalty, min_new columns
    params[:, 6] = torch.tensor([0.5, 30.0] * 3, device=DEVICE)[:rows]  # min_new: some rows still block EOS
    logits[:, eos] = 50.0  # EOS would win wherever it is not blocked
    seen = torch.rand(slots_total, vocab, device=DEVICE) < 0.3
    slots = torch.randperm(slots_total, device=DEVICE)[:rows]
    frames = torch.randint(0, 20, (rows,), device=DEVICE)
    suppress = torch.zeros(vocab, dtype=torch.bool, device=DEVICE)
    suppress[vocab - 40:] = True
    rules = draw.ZeroRules(seen.clone(), slots, frames, 5, 6, eos, suppress)
    table = torch.randn(vocab, 48, device=DEVICE).to(torch.bfloat16)
    rows_out = torch.empty(rows, 48, device=DEVICE).to(torch.bfloat16)
    got = draw.sample_draw(logits, noise, params, cols, 64, table=table, rows_out=rows_out, rules=rules)
    ruled = codebook_zero_rules(logits.float(), seen[slots], params[:, 5], frames, params[:, 6], eos, suppress)
    assert torch.equal(got, draw.sample_draw_ref(ruled, noise, params, cols, 64))
    assert torch.equal(rows_out, table[got]) and not suppress[got].any()
    want_seen = seen.clone()
    want_seen[slots, got] = True
    assert torch.equal(rules.seen, want_seen)
    ref_rules = draw.ZeroRules(seen.clone(), slots, frames, 5, 6, eos, suppress)
    assert torch.equal(draw.sample_draw_ref(logits, noise, params, cols, 64, rules=ref_rules), got)
    assert torch.equal(ref_rules.seen, want_seen)


@pytest.mark.parametrize("rules", [False, True], ids=["depth", "codebook-0"])
def test_with_pdl_the_draw_reads_nothing_before_its_wait(rules: bool) -> None:
    """sm_90 output (compiled here, no GPU needed) with PDL: the next kernel is released and the kernel ahead
    waited for before the first global load (logits, noise, parameters, seen rows, the table are all written by
    earlier kernels of the step); without PDL no grid dependency control at all."""
    from triton_mode import compiled_copy, hopper_compile

    d = compiled_copy("sample_draw")
    desc = {"logits_ptr": "*bf16", "noise_ptr": "*fp32", "params_ptr": "*fp32", "out_ptr": "*i64",
            "table_ptr": "*bf16", "rows_ptr": "*bf16", "seen_ptr": "*i1", "slots_ptr": "*i64", "frames_ptr": "*i64",
            "suppress_ptr": "*i1"}
    for pdl in (0, 1):
        consts = dict(BLOCK_V=2048, WAYS=4, STEPS=16, GATHER=True, BLOCK_H=1024, RULES=rules, PDL=pdl)
        lines = hopper_compile(d._sample_draw_kernel, consts, desc=desc, warps=4, stages=1).asm["ptx"].splitlines()
        loads = [i for i, line in enumerate(lines) if "ld.global" in line]
        if not pdl:
            assert not any("griddepcontrol" in line for line in lines)
            continue
        wait = next(i for i, line in enumerate(lines) if "griddepcontrol.wait" in line)
        release = next(i for i, line in enumerate(lines) if "griddepcontrol.launch_dependents" in line)
        assert release < wait < min(loads), (release, wait, min(loads))

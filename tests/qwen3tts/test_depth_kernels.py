"""The depth loop's fused kernels against their PyTorch references on fresh random inputs (Triton's interpreter
without a GPU, compiled on CUDA): kernels/cp_linear.py and kernels/cp_attend.py."""

from __future__ import annotations

from types import ModuleType

import pytest
import torch

pytest.importorskip("triton")

from .triton_mode import DEVICE, kernel_module

# fp32 differs only by the reduction order. The interpreter truncates fp32 -> bf16 where the GPU rounds to nearest:
# truncation always shrinks, so the normalized inputs' errors add up in one direction through a dot, and SwiGLU
# rounds four more times; interpreted, a bf16 output can sit a few steps apart (seen: 6 steps, 3.8 %).
BF16 = 2e-2 if DEVICE == "cuda" else 6e-2
TOL = {torch.float32: dict(rtol=1e-4, atol=1e-4), torch.bfloat16: dict(rtol=BF16, atol=BF16)}
DTYPES = [torch.float32, torch.bfloat16]
# 200 rows: more programs than SMs and more than one row tile; the real widths only where compiled
ROWS = [1, 2, 3, 17] + ([64, 128, 200] if DEVICE == "cuda" else [])
# (K, N): the predictor's projections (q|k|v, o, gate|up, down, lm_head) where compiled, small ones interpreted
SHAPES = ([(1024, 4096), (2048, 1024), (1024, 6144), (3072, 1024), (1024, 2048)] if DEVICE == "cuda"
          else [(64, 48), (96, 32), (160, 64)])


@pytest.fixture(scope="module")
def linear() -> ModuleType:
    return kernel_module("cp_linear")


@pytest.fixture(scope="module")
def attend() -> ModuleType:
    return kernel_module("cp_attend")


def _weights(rows: int, k: int, dtype: torch.dtype) -> torch.Tensor:
    return (torch.randn(rows, k, device=DEVICE) / k**0.5).to(dtype)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("k,n", SHAPES)
@pytest.mark.parametrize("mode", ["plain", "norm", "norm_float", "residual", "norm_swiglu"])
def test_cp_linear(linear: ModuleType, dtype: torch.dtype, rows: int, k: int, n: int, mode: str) -> None:
    x = (3 * torch.randn(rows, k, device=DEVICE)).to(dtype)
    norm = (1 + 0.1 * torch.randn(k, device=DEVICE)).to(dtype) if "norm" in mode else None
    swiglu = mode.endswith("swiglu")
    w = _weights(2 * n if swiglu else n, k, dtype)
    residual = torch.randn(rows, n, device=DEVICE).to(dtype) if mode == "residual" else None
    args = dict(norm=norm, eps=1e-6, residual=residual, swiglu=swiglu, out_float=mode.endswith("float"))
    got = linear.cp_linear(x, w, **args)
    want = linear.cp_linear_ref(x, w, **args)
    assert got.shape == want.shape == (rows, n) and got.dtype == want.dtype
    torch.testing.assert_close(got.float(), want.float(), **TOL[dtype])


def test_cp_linear_refuses_bad_shapes(linear: ModuleType) -> None:
    x = torch.randn(2, 8, device=DEVICE)
    with pytest.raises(AssertionError):
        linear.cp_linear(x, torch.randn(4, 6, device=DEVICE))
    with pytest.raises(AssertionError):
        linear.cp_linear(x, torch.randn(4, 8, device=DEVICE), residual=torch.randn(2, 3, device=DEVICE))


def _attend_inputs(n: int, heads: int, kv_heads: int, d: int, dtype: torch.dtype, positions: int = 16):
    from voxgate.engine.qwen3tts.layers import rope_tables

    qkv = (2 * torch.randn(n, (heads + 2 * kv_heads) * d, device=DEVICE)).to(dtype)
    qw, kw = ((1 + 0.1 * torch.randn(d, device=DEVICE)).to(dtype) for _ in range(2))
    cos, sin = rope_tables(torch.arange(positions, device=DEVICE), d, 1e6, dtype)
    # a depth-loop store: each token its own row; earlier positions hold keys and values already, later ones garbage
    store_rows = n + 3
    k_store = torch.randn(store_rows, kv_heads, positions, d, device=DEVICE).to(dtype)
    v_store = torch.randn(store_rows, kv_heads, positions, d, device=DEVICE).to(dtype)
    slots = torch.randperm(store_rows, device=DEVICE)[:n]
    pos = torch.randint(0, positions, (n,), device=DEVICE)
    return qkv, qw, kw, cos, sin, pos, k_store, v_store, slots


@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", ROWS)
@pytest.mark.parametrize("heads,kv_heads,d", [(4, 2, 16), (2, 2, 32)] + ([(16, 8, 128)] if DEVICE == "cuda" else []))
def test_cp_attend(attend: ModuleType, dtype: torch.dtype, n: int, heads: int, kv_heads: int, d: int) -> None:
    qkv, qw, kw, cos, sin, pos, k_store, v_store, slots = _attend_inputs(n, heads, kv_heads, d, dtype)
    k_want, v_want = k_store.clone(), v_store.clone()
    got = attend.cp_attend(qkv, qw, kw, cos, sin, pos, k_store, v_store, slots, heads, kv_heads, 1e-6)
    want = attend.cp_attend_ref(qkv, qw, kw, cos, sin, pos, k_want, v_want, slots, heads, kv_heads, 1e-6)
    torch.testing.assert_close(k_store.float(), k_want.float(), **TOL[dtype])
    torch.testing.assert_close(v_store, v_want)
    torch.testing.assert_close(got.float(), want.float(), **TOL[dtype])


# 1.7B projects into the predictor's width, 0.6B does not (interpreted: 1.7B only, ~30 s)
@pytest.mark.slow
@pytest.mark.parametrize("kind", ["cv17", "cv06"] if DEVICE == "cuda" else ["cv17"])
def test_fused_depth_loop_equals_the_layers(tiny_ckpt, linear: ModuleType, attend: ModuleType, draw: ModuleType,
                                            kind: str) -> None:
    """The whole depth loop for 3 rows on a tiny checkpoint (fp32): passes 1..14 through the fused kernels against
    the fused stack's layers, every codebook's logits, on the same forced codes."""
    from voxgate.engine.qwen3tts.batch_step import StepModel
    from voxgate.engine.qwen3tts.depth_fused import DepthOps
    from voxgate.engine.qwen3tts.fused_stack import DecoderOps
    from voxgate.engine.qwen3tts.generate import Qwen3TTS

    tts = Qwen3TTS.from_pretrained(tiny_ckpt(kind), dtype=torch.float32, device=DEVICE, progress=False)
    ops = DecoderOps.for_device(torch.device(DEVICE))
    models = {"layers": StepModel(tts.talker, ops),
              "fused": StepModel(tts.talker, ops, DepthOps(linear.cp_linear, attend.cp_attend, draw.sample_draw))}
    rows, hidden = 3, tts.talker.model.codec_embedding.weight.shape[1]
    h = torch.randn(rows, hidden, device=DEVICE)
    c0 = torch.randn(rows, hidden, device=DEVICE)
    forced = torch.randint(0, tts.talker.code_predictor.cfg.vocab_size, (rows, 15), device=DEVICE)
    logits: dict[str, list[torch.Tensor]] = {}
    for name, model in models.items():
        seen: list[torch.Tensor] = []

        def pick(lg: torch.Tensor, seen: list[torch.Tensor] = seen) -> torch.Tensor:
            seen.append(lg)
            return forced[:, len(seen) - 1]

        with torch.no_grad():
            codes = model.depth_loop(h, c0, pick)
        assert torch.equal(codes, forced)
        logits[name] = seen
    for k, (got, want) in enumerate(zip(logits["fused"], logits["layers"], strict=True)):
        assert got.dtype == torch.float32
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4, msg=f"codebook {k + 1}")


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


def test_sample_draw_matches_the_engines_distribution(draw: ModuleType) -> None:
    """The draw's frequencies against softmax(top-k logits / T), and the engine's PyTorch sampler's, over 4,000 rows
    of one distribution (independent noise per row). Interpreted, 4,000 programs take a minute: the reference
    stands in there (test_sample_draw holds the kernel to it id for id)."""
    from voxgate.engine.qwen3tts.sampling import sample_rows

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

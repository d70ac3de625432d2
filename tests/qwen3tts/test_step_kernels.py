"""The batched step's kernels against their PyTorch references on fresh random inputs (Triton's interpreter without
a GPU, compiled on CUDA): kernels/add_rms_norm.py, kernels/qk_norm_rope.py, kernels/slot_attention.py, and the
references against the eager modules of layers.py they stand in for."""

from __future__ import annotations

from types import ModuleType

import pytest
import torch

pytest.importorskip("triton")

from .triton_mode import DEVICE, kernel_module

# The interpreter truncates fp32 -> bf16 where the GPU rounds to nearest, so a value can sit one bf16 step apart
# there (2^-7 relative at worst); fp32 differs only by the reduction order.
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.bfloat16: dict(rtol=2e-2, atol=2e-2)}
DTYPES = [torch.float32, torch.bfloat16]
# the real shapes (16/8 heads of 128) only where the kernel is compiled: interpreted, they take seconds each
REAL_HEADS = [(16, 8, 128)] if DEVICE == "cuda" else []
ROWS = [1, 2, 3, 17] + ([64, 128, 200] if DEVICE == "cuda" else [])  # 200: more programs than SMs


@pytest.fixture(scope="module")
def norms() -> ModuleType:
    return kernel_module("add_rms_norm")


@pytest.fixture(scope="module")
def rope() -> ModuleType:
    return kernel_module("qk_norm_rope")


@pytest.fixture(scope="module")
def attention() -> ModuleType:
    return kernel_module("slot_attention")


@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,channels", [(1, 64), (3, 48), (17, 96), (5, 100)])  # 100: a channel mask
@pytest.mark.parametrize("with_delta", [False, True])
def test_add_rms_norm(norms: ModuleType, dtype: torch.dtype, rows: int, channels: int, with_delta: bool) -> None:
    x = torch.randn(rows, channels, device=DEVICE).to(dtype)
    delta = torch.randn(rows, channels, device=DEVICE).to(dtype) if with_delta else None
    w = (1 + 0.1 * torch.randn(channels, device=DEVICE)).to(dtype)
    total, out = norms.add_rms_norm(x, delta, w, 1e-6)
    want_total, want = norms.add_rms_norm_ref(x, delta, w, 1e-6)
    torch.testing.assert_close(total.float(), want_total.float(), **TOL[dtype])
    torch.testing.assert_close(out.float(), want.float(), **TOL[dtype])


def test_add_rms_norm_ref_is_layers_rmsnorm() -> None:
    from voxgate.engine.qwen3tts.layers import RMSNorm

    for dtype in DTYPES:
        norm = RMSNorm(32, 1e-6)
        with torch.no_grad():
            norm.weight.copy_(1 + 0.1 * torch.randn(32))
        norm = norm.to(dtype)
        from voxgate.kernels.add_rms_norm import add_rms_norm_ref

        x, d = torch.randn(4, 32).to(dtype), torch.randn(4, 32).to(dtype)
        total, out = add_rms_norm_ref(x, d, norm.weight.detach(), 1e-6)
        assert torch.equal(total, x + d) and torch.equal(out, norm(x + d))


def _rope_inputs(n: int, heads: int, kv_heads: int, d: int, dtype: torch.dtype, slots: int = 5, positions: int = 40):
    from voxgate.engine.qwen3tts.layers import rope_tables

    qkv = torch.randn(n, (heads + 2 * kv_heads) * d, device=DEVICE).to(dtype)
    qw, kw = ((1 + 0.1 * torch.randn(d, device=DEVICE)).to(dtype) for _ in range(2))
    cos, sin = rope_tables(torch.arange(positions, device=DEVICE), d, 1e6, dtype)
    # distinct (slot, position) pairs, in a random order
    pairs = torch.randperm(slots * positions, device=DEVICE)[:n]
    return qkv, qw, kw, cos, sin, pairs % positions, pairs // positions


@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", ROWS)
@pytest.mark.parametrize("heads,kv_heads,d", [(4, 2, 16), (2, 2, 64), *REAL_HEADS])
def test_qk_norm_rope(rope: ModuleType, dtype: torch.dtype, n: int, heads: int, kv_heads: int, d: int) -> None:
    qkv, qw, kw, cos, sin, pos, slots = _rope_inputs(n, heads, kv_heads, d, dtype)
    stores = [torch.full((5, 2, kv_heads, 40, d), float("nan"), device=DEVICE).to(dtype) for _ in range(2)]
    q = rope.qk_norm_rope(qkv, qw, kw, cos, sin, pos, stores[0][:, 0], stores[0][:, 1], slots, heads, kv_heads, 1e-6)
    want = rope.qk_norm_rope_ref(qkv, qw, kw, cos, sin, pos, stores[1][:, 0], stores[1][:, 1], slots, heads,
                                 kv_heads, 1e-6)
    torch.testing.assert_close(q.float(), want.float(), **TOL[dtype])
    # every written (slot, position) equal, everything else untouched (still NaN)
    torch.testing.assert_close(stores[0].float(), stores[1].float(), equal_nan=True, **TOL[dtype])
    assert torch.isnan(stores[0]).sum() == torch.isnan(stores[1]).sum() == stores[0].numel() - 2 * n * kv_heads * d


def test_qk_norm_rope_ref_is_the_eager_attention_inputs() -> None:
    """The reference equals layers.Attention's q/k-norm then apply_rope (same ops, same order)."""
    from voxgate.engine.qwen3tts.layers import Attention, apply_rope
    from voxgate.kernels.qk_norm_rope import qk_norm_rope_ref

    attn = Attention(32, 4, 2, 16, 1e-6, qk_norm=True)
    with torch.no_grad():
        for norm in (attn.q_norm, attn.k_norm):
            norm.weight.copy_(1 + 0.1 * torch.randn(16))
    qkv, _, _, cos, sin, pos, slots = _rope_inputs(6, 4, 2, 16, torch.float32)
    qkv = qkv.cpu()
    store = torch.zeros(5, 2, 2, 40, 16)
    q = qk_norm_rope_ref(qkv, attn.q_norm.weight.detach(), attn.k_norm.weight.detach(), cos.cpu(), sin.cpu(),
                         pos.cpu(), store[:, 0], store[:, 1], slots.cpu(), 4, 2, 1e-6)
    q_heads, k_heads, _ = qkv.view(6, 8, 16).split((4, 2, 2), dim=1)
    c, s = cos.cpu()[pos.cpu()][:, None], sin.cpu()[pos.cpu()][:, None]
    with torch.no_grad():
        assert torch.equal(q, apply_rope(attn.q_norm(q_heads), c, s))
        assert torch.equal(store[slots.cpu(), 0, :, pos.cpu()], apply_rope(attn.k_norm(k_heads), c, s))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", ROWS)
@pytest.mark.parametrize("hq,hkv,d,positions", [(4, 2, 16, 150), (2, 2, 32, 1),
                                                 *[(h, kv, d, 300) for h, kv, d in REAL_HEADS]])
def test_slot_attention(attention: ModuleType, dtype: torch.dtype, n: int, hq: int, hkv: int, d: int,
                        positions: int) -> None:
    slots_n = 6
    kv = torch.randn(slots_n, 2, hkv, positions, d, device=DEVICE).to(dtype)
    lengths = torch.randint(1, positions + 1, (n,), device=DEVICE)
    # unwritten positions hold garbage, even NaN: a token past its length must never see them (tokens of one slot
    # see different lengths, so only what lies past the slot's longest is poisoned)
    visible = torch.arange(positions, device=DEVICE)
    slots = torch.randint(0, slots_n, (n,), device=DEVICE)
    poisoned = kv.clone()
    for s in slots.unique():
        poisoned[s, :, :, visible >= lengths[slots == s].max()] = float("nan")
    q = torch.randn(n, hq, d, device=DEVICE).to(dtype)
    out = attention.slot_attention(q, poisoned[:, 0], poisoned[:, 1], slots, lengths)
    want = attention.slot_attention_ref(q.float(), kv[:, 0].float(), kv[:, 1].float(), slots, lengths)
    assert not torch.isnan(out).any()
    torch.testing.assert_close(out.float(), want, **TOL[dtype])


def test_slot_attention_ref_is_sdpa_over_each_tokens_own_prefix() -> None:
    """The reference against plain per-token SDPA over exactly its slot's first `length` keys (GQA mapping)."""
    from voxgate.kernels.slot_attention import slot_attention_ref

    kv = torch.randn(3, 2, 2, 20, 8)
    q = torch.randn(5, 4, 8)
    slots, lengths = torch.tensor([0, 2, 2, 1, 0]), torch.tensor([1, 20, 7, 13, 4])
    out = slot_attention_ref(q, kv[:, 0], kv[:, 1], slots, lengths)
    for i in range(5):
        k = kv[slots[i], 0, :, : lengths[i]].repeat_interleave(2, dim=0)  # query head h reads kv head h // 2
        v = kv[slots[i], 1, :, : lengths[i]].repeat_interleave(2, dim=0)
        want = torch.softmax(q[i][:, None] @ k.transpose(-1, -2) / 8**0.5, -1) @ v
        torch.testing.assert_close(out[i], want[:, 0], rtol=1e-5, atol=1e-6)

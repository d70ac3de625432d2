"""kernels/qk_norm_rope.py against its PyTorch reference on fresh random inputs (Triton's interpreter without a
GPU, compiled on CUDA), and the reference against layers.Attention's q/k-norm and RoPE, which it stands in for."""

from __future__ import annotations

from types import ModuleType

import pytest
import torch

pytest.importorskip("triton")

from kernel_cases import DTYPES, REAL_HEADS, ROWS, STEP_TOL
from triton_mode import DEVICE, kernel_module


@pytest.fixture(scope="module")
def rope() -> ModuleType:
    return kernel_module("qk_norm_rope")


def _rope_inputs(n: int, heads: int, kv_heads: int, d: int, dtype: torch.dtype, slots: int = 5, positions: int = 40):
    from voxgate.engine.qwen3tts.model.layers import rope_tables

    qkv = torch.randn(n, (heads + 2 * kv_heads) * d, device=DEVICE).to(dtype)
    qw, kw = ((1 + 0.1 * torch.randn(d, device=DEVICE)).to(dtype) for _ in range(2))
    cos, sin = rope_tables(torch.arange(positions, device=DEVICE), d, 1e6, dtype)
    # distinct (slot, position) pairs, in a random order
    pairs = torch.randperm(slots * positions, device=DEVICE)[:n]
    return qkv, qw, kw, cos, sin, pairs % positions, pairs // positions


@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", ROWS)
@pytest.mark.parametrize("heads,kv_heads,d", [(4, 2, 16), (2, 2, 64), (3, 1, 16), *REAL_HEADS])
@pytest.mark.parametrize("per_token", [False, True])
def test_qk_norm_rope(rope: ModuleType, dtype: torch.dtype, n: int, heads: int, kv_heads: int, d: int,
                      per_token: bool) -> None:
    """Both launch shapes (a program per (token, head), and per token with its heads; GQA 3/1 pads the heads to a
    power of two)."""
    qkv, qw, kw, cos, sin, pos, slots = _rope_inputs(n, heads, kv_heads, d, dtype)
    stores = [torch.full((5, 2, kv_heads, 40, d), float("nan"), device=DEVICE).to(dtype) for _ in range(2)]
    q = rope.qk_norm_rope(qkv, qw, kw, cos, sin, pos, stores[0][:, 0], stores[0][:, 1], slots, heads, kv_heads, 1e-6,
                          per_token=per_token)
    want = rope.qk_norm_rope_ref(qkv, qw, kw, cos, sin, pos, stores[1][:, 0], stores[1][:, 1], slots, heads,
                                 kv_heads, 1e-6)
    torch.testing.assert_close(q.float(), want.float(), **STEP_TOL[dtype])
    # every written (slot, position) equal, everything else untouched (still NaN)
    torch.testing.assert_close(stores[0].float(), stores[1].float(), equal_nan=True, **STEP_TOL[dtype])
    assert torch.isnan(stores[0]).sum() == torch.isnan(stores[1]).sum() == stores[0].numel() - 2 * n * kv_heads * d


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 3, 17])
@pytest.mark.parametrize("heads,kv_heads,d,hidden", [(4, 2, 16, 24), (2, 2, 64, 100)])
@pytest.mark.parametrize("per_token", [False, True])
def test_qk_norm_rope_scaled_by_the_residual_rms(rope: ModuleType, dtype: torch.dtype, n: int, heads: int,
                                                 kv_heads: int, d: int, hidden: int, per_token: bool) -> None:
    """With a residual (a folded input norm): q, k and v scaled by 1 / RMS of the token's residual row first.
    Both launch shapes against the reference; the reference's values (the stored v) against the scale taken by
    hand, on rows of very different size (q and k are normalized per head afterwards, v is not)."""
    qkv, qw, kw, cos, sin, pos, slots = _rope_inputs(n, heads, kv_heads, d, dtype)
    res = (torch.randn(n, hidden, device=DEVICE) * torch.logspace(-1, 2, n, device=DEVICE)[:, None]).to(dtype)
    stores = [torch.full((5, 2, kv_heads, 40, d), float("nan"), device=DEVICE).to(dtype) for _ in range(2)]
    q = rope.qk_norm_rope(qkv, qw, kw, cos, sin, pos, stores[0][:, 0], stores[0][:, 1], slots, heads, kv_heads, 1e-6,
                          per_token=per_token, residual=res)
    want = rope.qk_norm_rope_ref(qkv, qw, kw, cos, sin, pos, stores[1][:, 0], stores[1][:, 1], slots, heads,
                                 kv_heads, 1e-6, residual=res)
    torch.testing.assert_close(q.float(), want.float(), **STEP_TOL[dtype])
    torch.testing.assert_close(stores[0].float(), stores[1].float(), equal_nan=True, **STEP_TOL[dtype])
    v = qkv.view(n, heads + 2 * kv_heads, d)[:, heads + kv_heads:].double()
    v = v / res.double().pow(2).mean(-1).add(1e-6).sqrt()[:, None, None]
    torch.testing.assert_close(stores[1][:, 1][slots, :, pos].double(), v, **STEP_TOL[dtype])


def test_qk_norm_rope_ref_is_the_eager_attention_inputs() -> None:
    """The reference equals layers.Attention's q/k-norm then apply_rope (same ops, same order)."""
    from voxgate.engine.qwen3tts.model.layers import Attention, apply_rope
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

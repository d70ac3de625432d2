"""kernels/slot_attention.py against its PyTorch reference on fresh random inputs (Triton's interpreter without a
GPU, compiled on CUDA), and the reference against plain per-token SDPA."""

from __future__ import annotations

from types import ModuleType

import pytest
import torch

pytest.importorskip("triton")

from kernel_cases import DTYPES, REAL_HEADS, ROWS, STEP_TOL
from triton_mode import DEVICE, kernel_module


@pytest.fixture(scope="module")
def attention() -> ModuleType:
    return kernel_module("slot_attention")


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
    torch.testing.assert_close(out.float(), want, **STEP_TOL[dtype])


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

"""kernels/prefill_attention.py against the per-token reference (slot_attention_ref) on fresh random packed prompts
(Triton's interpreter without a GPU, compiled on CUDA), and its block table."""

from __future__ import annotations

from types import ModuleType

import pytest
import torch

pytest.importorskip("triton")

from kernel_cases import DTYPES, REAL_HEADS, STEP_TOL
from triton_mode import DEVICE, kernel_module


@pytest.fixture(scope="module")
def attention() -> ModuleType:
    return kernel_module("prefill_attention")


def test_block_table_cuts_each_prompt_into_blocks_of_its_own():
    from voxgate.kernels.prefill_attention import block_table, max_blocks

    table = block_table([5, 1, 9], block_m=4, rows=7)
    assert table.tolist() == [[0, 0, 0, 4], [4, 0, 4, 1], [5, 1, 0, 1], [6, 2, 0, 4], [10, 2, 4, 4],
                              [14, 2, 8, 1], [0, 0, 0, 0]]
    assert max_blocks(15, 3, block_m=4) >= 6
    with pytest.raises(ValueError, match="6 blocks for a table of 5"):
        block_table([5, 1, 9], block_m=4, rows=5)


# GQA 4/2 and 3/1 (a group that is not a power of two), one short prompt, prompts longer than a key block
CASES = [(4, 2, 16, [1, 7, 40]), (3, 1, 32, [70, 2, 33, 5]), (2, 2, 16, [1])]
if DEVICE == "cuda":
    CASES += [(h, kv, d, [int(t) for t in torch.randint(1, 300, (40,))]) for h, kv, d in REAL_HEADS]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hq,hkv,d,lengths", CASES)
def test_prefill_attention_equals_each_tokens_own_attention(attention: ModuleType, dtype: torch.dtype, hq: int,
                                                            hkv: int, d: int, lengths: list[int]) -> None:
    positions = max(lengths) + 3
    n = sum(lengths)
    kv = torch.randn(len(lengths) + 1, 2, hkv, positions, d, device=DEVICE).to(dtype)
    poisoned = kv.clone()
    for slot, t in enumerate(lengths):  # past a prompt's last token: garbage no token may read
        poisoned[slot, :, :, t:] = float("nan")
    poisoned[-1] = float("nan")  # a slot no prompt uses
    q = torch.randn(n, hq, d, device=DEVICE).to(dtype)
    table = attention.block_table(lengths, rows=attention.max_blocks(n, len(lengths)) + 2).to(DEVICE)
    out = attention.prefill_attention(q, poisoned[:, 0], poisoned[:, 1], table)
    slots = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths)).to(DEVICE)
    own = torch.cat([torch.arange(1, t + 1) for t in lengths]).to(DEVICE)
    want = attention.slot_attention_ref(q.float(), kv[:, 0].float(), kv[:, 1].float(), slots, own)
    assert not torch.isnan(out).any()
    torch.testing.assert_close(out.float(), want, **STEP_TOL[dtype])
    ref = attention.prefill_attention_ref(q.float(), kv[:, 0].float(), kv[:, 1].float(), table)
    torch.testing.assert_close(ref, want, rtol=1e-5, atol=1e-5)

"""kernels/cp_attend.py (the depth loop's fused q/k-norm, RoPE, store write and attention) against its PyTorch
reference on fresh random inputs (Triton's interpreter without a GPU, compiled on CUDA)."""

from __future__ import annotations

from types import ModuleType

import pytest
import torch

pytest.importorskip("triton")

from kernel_cases import DEPTH_TOL, DTYPES, ROWS
from triton_mode import DEVICE, kernel_module


@pytest.fixture(scope="module")
def attend() -> ModuleType:
    return kernel_module("cp_attend")


def _attend_inputs(n: int, heads: int, kv_heads: int, d: int, dtype: torch.dtype, positions: int = 16):
    from voxgate.engine.qwen3tts.model.layers import rope_tables

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
    torch.testing.assert_close(k_store.float(), k_want.float(), **DEPTH_TOL[dtype])
    torch.testing.assert_close(v_store, v_want)
    torch.testing.assert_close(got.float(), want.float(), **DEPTH_TOL[dtype])

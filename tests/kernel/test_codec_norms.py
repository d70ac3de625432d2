"""kernels/codec_norms.py: the fused depthwise conv + LayerNorm and the RMSNorm kernels, and their PyTorch
references, against independent oracles (TRITON_INTERPRET=1 without a GPU)."""

from __future__ import annotations

from types import ModuleType

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("triton")

from triton_mode import DEVICE, kernel_module
from voxgate.engine.qwen3tts.model.layers import RMSNorm

# fp32: only summation order differs. bf16: both sides round the same fp32 values, but a one-ulp difference in
# the conv sum can flip its rounding (and Triton's CPU interpreter truncates to bf16 instead of rounding).
TOL = {torch.float32: 1e-5, torch.bfloat16: 2e-2}


@pytest.fixture(scope="module")
def mod() -> ModuleType:
    return kernel_module("codec_norms")


def _dwconv_ln_oracle(x: torch.Tensor, state: torch.Tensor, slots: torch.Tensor, weight: torch.Tensor,
                      bias: torch.Tensor, ln_weight: torch.Tensor, ln_bias: torch.Tensor, eps: float) -> torch.Tensor:
    """Channel-major torch conv1d over (history ++ new inputs), rounded where the conv output is stored, then
    F.layer_norm. fp32 on the CPU: no TF32, the rounding to x's dtype is the only one before the norm."""
    dtype, channels = x.dtype, x.shape[2]
    cpu = [t.cpu().float() for t in (x, state, weight, bias, ln_weight, ln_bias)]
    xc, st, w, b, lw, lb = cpu
    xin = torch.cat([st[slots.cpu()], xc], dim=1).transpose(1, 2)  # [B, C, K-1+L]
    conv = F.conv1d(xin, w[:, None, :], b, groups=channels).to(dtype).float().transpose(1, 2)  # [B, L, C]
    return F.layer_norm(conv, (channels,), lw, lb, eps).to(dtype)


def _dwconv_case(bsz: int, length: int, channels: int, k: int, dtype: torch.dtype,
                 ) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
    num_slots = 5
    # The history is a view into a bigger pool: slot and time strides unlike a contiguous [slots, K-1, C].
    pool = torch.randn(num_slots, k + 2, 3, channels).to(dtype).to(DEVICE)
    state = pool[:, 1:k, 1]
    assert state.shape == (num_slots, k - 1, channels) and (k == 1 or not state.is_contiguous())
    slots = torch.tensor([3, 0, 4, 0, 1, 0][:bsz], dtype=torch.int64, device=DEVICE)  # out of order, 0 repeated
    x = torch.randn(bsz, length, channels).to(dtype).to(DEVICE)
    weight = (torch.randn(channels, k) / k**0.5).to(dtype).to(DEVICE)
    bias = (0.5 * torch.randn(channels)).to(dtype).to(DEVICE)
    ln_weight = (1 + 0.5 * torch.randn(channels)).to(dtype).to(DEVICE)
    ln_bias = (0.2 * torch.randn(channels)).to(dtype).to(DEVICE)
    return (x, state, slots, weight, bias, ln_weight, ln_bias), pool


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("bsz", "length", "channels", "k"), [
    (6, 1, 24, 7),  # one new step per row, all taps but one from the history
    (4, 5, 40, 7),  # L < K-1: the window straddles history and new inputs
    (3, 33, 24, 7),  # L > K: later rows read only new inputs
    (2, 4, 17, 3),  # another kernel size
    (2, 3, 8, 1),  # K = 1: no history at all
])
def test_dwconv_layernorm(mod: ModuleType, bsz: int, length: int, channels: int, k: int,
                          dtype: torch.dtype) -> None:
    args, pool = _dwconv_case(bsz, length, channels, k, dtype)
    pool_before = pool.clone()
    want = _dwconv_ln_oracle(*args, 1e-6)
    got = mod.dwconv_layernorm(*args, 1e-6)
    ref = mod.dwconv_layernorm_ref(*args, 1e-6)
    assert got.shape == args[0].shape and got.dtype == dtype and got.is_contiguous()
    assert torch.equal(pool, pool_before), "the kernel must not touch the history"
    tol = TOL[dtype]
    torch.testing.assert_close(got.float().cpu(), want.float(), atol=tol, rtol=tol)
    torch.testing.assert_close(ref.float().cpu(), want.float(), atol=tol, rtol=tol)


def test_dwconv_layernorm_history_matters(mod: ModuleType) -> None:
    """Guards the oracle comparison against a kernel that ignores the slots: rows that differ only in their
    slot give different outputs, rows that share a slot the same."""
    args, _ = _dwconv_case(4, 2, 24, 7, torch.float32)
    x = args[0][:1].expand(4, -1, -1).contiguous()
    got = mod.dwconv_layernorm(x, *args[1:], 1e-6)  # slots 3, 0, 4, 0
    assert torch.equal(got[1], got[3])
    assert not torch.allclose(got[0], got[1]) and not torch.allclose(got[0], got[2])


def test_dwconv_layernorm_empty(mod: ModuleType) -> None:
    args, _ = _dwconv_case(2, 1, 24, 7, torch.float32)
    x = args[0][:, :0]
    assert mod.dwconv_layernorm(x, *args[1:], 1e-6).shape == (2, 0, 24)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("rows", "channels"), [(1, 24), (7, 40), (3, 1000)])
def test_rms_norm(mod: ModuleType, rows: int, channels: int, dtype: torch.dtype) -> None:
    eps = 1e-6
    norm = RMSNorm(channels, eps)
    with torch.no_grad():
        norm.weight.copy_(1 + 0.5 * torch.randn(channels))
    norm = norm.to(device=DEVICE, dtype=dtype)
    x = (3 * torch.randn(rows, channels)).to(dtype).to(DEVICE)
    with torch.no_grad():
        want = norm(x)
    got = mod.rms_norm(x, norm.weight.detach(), eps)
    ref = mod.rms_norm_ref(x, norm.weight.detach(), eps)
    assert got.shape == x.shape and got.dtype == dtype and got.is_contiguous()
    tol = TOL[dtype]
    torch.testing.assert_close(got.float(), want.float(), atol=tol, rtol=tol)
    torch.testing.assert_close(ref, want, atol=0, rtol=0)  # same ops in the same order


def test_rms_norm_strided_rows(mod: ModuleType) -> None:
    x = torch.randn(5, 64, device=DEVICE)[:, :40]  # row stride 64
    w = torch.randn(40, device=DEVICE)
    torch.testing.assert_close(mod.rms_norm(x, w, 1e-6), mod.rms_norm_ref(x, w, 1e-6), atol=1e-5, rtol=1e-5)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_graph_capture(mod: ModuleType) -> None:
    """No host syncs: both kernels capture in a CUDA graph, and replays follow new inputs and slots."""
    args, _ = _dwconv_case(4, 2, 1024, 7, torch.bfloat16)
    x, slots = args[0], args[2]
    h = torch.randn(4, 2048, device=DEVICE, dtype=torch.bfloat16)
    hw = torch.randn(2048, device=DEVICE, dtype=torch.bfloat16)
    mod.dwconv_layernorm(*args, 1e-6), mod.rms_norm(h, hw, 1e-6)  # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = mod.dwconv_layernorm(*args, 1e-6)
        r = mod.rms_norm(h, hw, 1e-6)
    x.copy_(torch.randn_like(x))
    slots.copy_(torch.tensor([1, 2, 0, 0], device=DEVICE))
    h.copy_(torch.randn_like(h))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(y, mod.dwconv_layernorm(*args, 1e-6))
    assert torch.equal(r, mod.rms_norm(h, hw, 1e-6))

"""kernels/ring_attention.py: the fused RoPE + ring-window attention step (Triton, TRITON_INTERPRET=1 without a GPU)
and its PyTorch reference, both against an oracle that keeps each stream's whole history instead of a ring."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import pytest
import torch

pytest.importorskip("triton")

from triton_mode import DEVICE, kernel_module

# The interpreter truncates to bf16 where the GPU rounds: a bf16 ulp (2^-8 relative) apart at worst, per value.
TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 2e-2}


@pytest.fixture(scope="module")
def mod() -> ModuleType:
    return kernel_module("ring_attention")


def _tables(pos: torch.Tensor, head_dim: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate-half RoPE cos/sin [B, T, head_dim] of absolute positions pos [B, T]."""
    inv_freq = 1.0 / 10000.0 ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    ang = pos.double()[..., None] * inv_freq
    ang = torch.cat((ang, ang), dim=-1)
    return ang.cos().to(dtype), ang.sin().to(dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [heads, D] at one position, cos/sin [D]: the pairs (x_i, x_{i+D/2}) rotated in fp32, rounded once."""
    xf, c, s = x.float(), cos.float(), sin.float()
    half = x.shape[-1] // 2
    x1, x2 = xf[:, :half], xf[:, half:]
    return torch.cat((x1 * c[:half] - x2 * s[:half], x2 * c[half:] + x1 * s[half:]), dim=-1).to(x.dtype)


class _Stream:
    """One stream's full history of rotated keys and values: the oracle never looks at a ring."""

    def __init__(self, slot: int) -> None:
        self.slot = slot
        self.keys: list[torch.Tensor] = []  # [heads, D] per position, in the storage dtype
        self.vals: list[torch.Tensor] = []

    def step(self, qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, n: int, R: int, heads: int,
             ) -> torch.Tensor:
        """Appends n frames (qkv [T, 3, heads, D] on CPU); returns their outputs [n, heads, D] in float64,
        attending over absolute positions max(0, P - R) .. P of the whole history."""
        pos0 = len(self.keys)
        qs = []
        for t in range(n):
            qs.append(_rotate(qkv[t, 0], cos[t], sin[t]))
            self.keys.append(_rotate(qkv[t, 1], cos[t], sin[t]))
            self.vals.append(qkv[t, 2])
        if n == 0:
            return torch.empty(0, heads, qkv.shape[-1], dtype=torch.float64)
        q = torch.stack(qs).double()  # [n, heads, D]
        k, v = torch.stack(self.keys).double(), torch.stack(self.vals).double()  # [L, heads, D]
        qpos = pos0 + torch.arange(n)[:, None]
        kpos = torch.arange(len(self.keys))[None, :]
        allowed = (kpos <= qpos) & (kpos >= qpos - R)  # [n, L]
        scores = torch.einsum("thd,lhd->htl", q, k) / q.shape[-1] ** 0.5
        probs = scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1)
        return torch.einsum("htl,lhd->thd", probs, v)

    def ring(self, initial: torch.Tensor, R: int) -> tuple[torch.Tensor, torch.Tensor]:
        """What the slot's ring [2, R, HD] must hold: the last R positions at p % R, elsewhere what it held."""
        want = initial.clone()
        for p in range(max(0, len(self.keys) - R), len(self.keys)):
            want[0, p % R] = self.keys[p].reshape(-1)
            want[1, p % R] = self.vals[p].reshape(-1)
        return want[0], want[1]


Attn = Callable[..., torch.Tensor]


def _drive(attn: Attn, dtype: torch.dtype, R: int, heads: int, head_dim: int, steps: list[int], seed: int) -> None:
    """Runs 4 streams (slots not in row order, rows shuffled every step) plus 2 padding rows (slot 0, n = 0)
    through `steps` (each step's T), with n per stream T, 0 or random; checks outputs and the whole pool."""
    gen = torch.Generator().manual_seed(seed)
    hd = heads * head_dim
    tol = TOLERANCE[dtype]
    # Pool [slots, layers, 2, R, HD]; the attended layer is 1. Garbage everywhere (not zeros), so attending to a
    # ring row that holds no valid position shows up in the output.
    pool = (5 * torch.randn(9, 2, 2, R, hd, generator=gen)).to(dtype)
    initial = pool.clone()
    pool = pool.to(DEVICE)
    ring_k, ring_v = pool[:, 1, 0], pool[:, 1, 1]
    streams = [_Stream(s) for s in (5, 2, 7, 3)]
    for i, T in enumerate(steps):
        ns = [T if (s + i) % 4 == 0 else 0 if (s + i) % 4 == 1 else int(torch.randint(1, T + 1, (), generator=gen))
              for s in range(len(streams))]
        order = torch.randperm(len(streams) + 2, generator=gen).tolist()  # row -> stream index, >= 4: padding
        B = len(order)
        slots = torch.tensor([streams[o].slot if o < 4 else 0 for o in order])
        pos0 = torch.tensor([len(streams[o].keys) if o < 4 else 3 * (o - 4) for o in order])
        n = torch.tensor([ns[o] if o < 4 else 0 for o in order])
        qkv = torch.randn(B, T, 3 * hd, generator=gen).to(dtype)
        cos, sin = _tables(pos0[:, None] + torch.arange(T), head_dim, dtype)

        out = attn(qkv.to(DEVICE), cos.to(DEVICE), sin.to(DEVICE), ring_k, ring_v, slots.to(DEVICE),
                   pos0.to(DEVICE), n.to(DEVICE), heads, head_dim)
        assert out.shape == (B, T, hd) and out.dtype == dtype, (out.shape, out.dtype)
        out = out.cpu()
        for row, o in enumerate(order):
            if o >= 4:
                continue
            want = streams[o].step(qkv[row].view(T, 3, heads, head_dim), cos[row], sin[row], ns[o], R, heads)
            got = out[row, :ns[o]].view(-1, heads, head_dim).double()
            torch.testing.assert_close(got, want, atol=tol, rtol=tol, msg=lambda m, i=i, o=o: f"step {i}, {o}: {m}")

        now = pool.cpu()
        for s in streams:
            want_k, want_v = s.ring(initial[s.slot, 1], R)
            torch.testing.assert_close(now[s.slot, 1, 0].double(), want_k.double(), atol=tol, rtol=tol)
            torch.testing.assert_close(now[s.slot, 1, 1].double(), want_v.double(), atol=tol, rtol=tol)
        # Nothing else moves: the other layer, the padding slot 0 and the unused slots, bit for bit.
        assert torch.equal(now[:, 0], initial[:, 0])
        untouched = [c for c in range(pool.shape[0]) if c not in {s.slot for s in streams}]
        assert torch.equal(now[untouched], initial[untouched])
    lengths = [len(s.keys) for s in streams]
    assert min(lengths) > R + 1 and max(lengths) > 2 * R, ("every ring should have wrapped", lengths)


# (R, heads, head_dim, steps): small rings wrap every step or two; R = 71 is the model's ring (self + 71 past).
CASES = [
    (7, 2, 16, [1, 3, 4, 16, 1, 64, 5, 16, 20, 2, 1, 16]),
    (11, 2, 32, [16, 1, 4, 3, 64, 1, 16, 7, 16, 3]),
    (71, 2, 16, [16, 64, 1, 3, 64, 16, 4, 64, 33]),
    (9, 4, 8, [1, 16, 4, 3, 16, 8]),  # head_dim below tl.dot's 16 (the tiny test codec): padded in the kernel
]


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("R", "heads", "head_dim", "steps"), CASES)
def test_kernel_matches_history_oracle(mod: ModuleType, dtype: torch.dtype, R: int, heads: int, head_dim: int,
                                       steps: list[int]) -> None:
    _drive(mod.ring_attention, dtype, R, heads, head_dim, steps, seed=R)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("R", "heads", "head_dim", "steps"), CASES)
def test_reference_matches_history_oracle(mod: ModuleType, dtype: torch.dtype, R: int, heads: int, head_dim: int,
                                          steps: list[int]) -> None:
    _drive(mod.ring_attention_ref, dtype, R, heads, head_dim, steps, seed=R + 1)


@pytest.mark.parametrize("impl", ["ring_attention", "ring_attention_ref"])
def test_fresh_slot_attends_only_to_new_keys(mod: ModuleType, impl: str) -> None:
    """A fresh (zero) slot: the first step is plain causal attention over its own keys, which zero keys would
    dilute (score 0 each) if they were attended."""
    heads, head_dim, R, T = 2, 16, 71, 6
    hd = heads * head_dim
    gen = torch.Generator().manual_seed(0)
    qkv = torch.randn(2, T, 3 * hd, generator=gen)
    pos0, n = torch.zeros(2, dtype=torch.int64), torch.tensor([T, 4])
    cos, sin = _tables(pos0[:, None] + torch.arange(T), head_dim, torch.float32)
    pool = torch.zeros(3, 2, R, hd, device=DEVICE)
    out = getattr(mod, impl)(qkv.to(DEVICE), cos.to(DEVICE), sin.to(DEVICE), pool[:, 0], pool[:, 1],
                             torch.tensor([2, 1], device=DEVICE), pos0.to(DEVICE), n.to(DEVICE), heads, head_dim)
    out = out.cpu()
    for b in range(2):
        x = qkv[b].view(T, 3, heads, head_dim)
        q = torch.stack([_rotate(x[t, 0], cos[b, t], sin[b, t]) for t in range(T)]).double()
        k = torch.stack([_rotate(x[t, 1], cos[b, t], sin[b, t]) for t in range(T)]).double()
        scores = torch.einsum("thd,shd->hts", q, k) / head_dim**0.5
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        want = torch.einsum("hts,shd->thd", scores.masked_fill(~causal, float("-inf")).softmax(-1), x[:, 2].double())
        got = out[b].view(T, heads, head_dim).double()
        torch.testing.assert_close(got[: n[b]], want[: n[b]], atol=1e-5, rtol=1e-5)
        # The ring got exactly the real frames (rows 0 .. n-1), nothing past them.
        ring_k = pool[2 - b, 0].cpu()
        torch.testing.assert_close(ring_k[: n[b]].view(-1, heads, head_dim).double(), k[: n[b]], atol=1e-5, rtol=1e-5)
        assert not ring_k[n[b]:].any()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rope_rows_match_rope_tables(mod: ModuleType, dtype: torch.dtype) -> None:
    """rope_rows' cos/sin of positions pos0[b] + t (one launch) against the engine's rope_tables and the module's
    reference, at positions up to the codec's 8,000: the same bits on CUDA (both libdevice's), within the
    interpreter's rounding on the CPU."""
    from voxgate.engine.qwen3tts.model.layers import rope_inv_freq, rope_tables

    pos0 = torch.tensor([0, 7, 4093, 7990], dtype=torch.int64).to(DEVICE)
    inv_freq = rope_inv_freq(64, 10000.0, torch.device(DEVICE))
    for frames in (1, 4, 9):
        cos, sin = mod.rope_rows(pos0, frames, inv_freq, dtype)
        positions = (pos0[:, None] + torch.arange(frames, device=DEVICE)).reshape(-1)
        want = [w.view(4, frames, 64) for w in rope_tables(positions, 64, 10000.0, dtype)]
        ref = mod.rope_rows_ref(pos0, frames, inv_freq, dtype)
        for got, table, plain in zip((cos, sin), want, ref, strict=True):
            torch.testing.assert_close(plain, table, atol=0, rtol=0)
            if DEVICE == "cuda":
                torch.testing.assert_close(got, table, atol=0, rtol=0)
            else:
                torch.testing.assert_close(got.float(), table.float(), atol=TOLERANCE[dtype] / 2, rtol=0)
    empty = mod.rope_rows(pos0[:0], 4, inv_freq, dtype)
    assert empty[0].shape == empty[1].shape == (0, 4, 64)

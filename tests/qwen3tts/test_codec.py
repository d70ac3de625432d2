"""Whole-utterance codec decode equals the reference decoder (fp32), and is causal."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch


def _codes(frames: int, seed: int) -> torch.Tensor:
    return torch.randint(0, 2048, (frames, 16), generator=torch.Generator().manual_seed(seed))


@pytest.mark.slow
@pytest.mark.parametrize("frames", [1, 7, 73, 300])  # 73: one past the sliding window; 300: the reference's chunk
def test_decode_matches_reference(ours: Any, reference: Any, tiny_ckpt: Callable[[str], Path], frames: int) -> None:
    reference("cv17")  # imports the reference with its stubs (skips or fails cleanly without it)
    from .reference import reference_codec

    ref = reference_codec(tiny_ckpt("cv17"), torch.float32)
    codes = _codes(frames, frames)
    got = ours("cv17").decode(codes)
    with torch.no_grad():
        want = ref.chunked_decode(codes.T[None])[0, 0].numpy()
    assert got.shape == want.shape == (frames * 1920,)
    scale = float(abs(want).max())
    assert 0.0 < scale <= 1.0
    err = float(abs(got - want).max())
    assert err <= 1e-5 * scale, f"max abs error {err:.3g} vs scale {scale:.3g}"


@pytest.mark.slow
def test_decode_is_causal_prefix(ours: Any) -> None:
    """Frame t's audio is final once frame t exists: a prefix decode equals the prefix of a longer decode."""
    m = ours("cv17")
    codes = _codes(90, 3)
    full = m.decode(codes)
    part = m.decode(codes[:41])
    assert abs(full[: 41 * 1920] - part).max() < 1e-5


@pytest.mark.slow
def test_padding_codes_are_clamped(ours: Any) -> None:
    m = ours("cv17")
    codes = _codes(4, 5)
    padded = codes.clone()
    padded[:, :] = torch.where(torch.arange(16) == 3, -1, codes)  # -1 padding is read as code 0
    zeroed = codes.clone()
    zeroed[:, 3] = 0
    assert (m.decode(padded) == m.decode(zeroed)).all()

"""kernels/snake.py: the Triton SnakeBeta against its PyTorch reference (TRITON_INTERPRET=1 without a GPU)."""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
import torch

pytest.importorskip("triton")


@pytest.fixture(scope="module")
def snake_mod() -> ModuleType:
    """The kernel module, re-imported in interpreter mode when there is no GPU (the mode is fixed at jit time)."""
    if torch.cuda.is_available():
        return importlib.import_module("voxgate.kernels.snake")
    old = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        return importlib.reload(importlib.import_module("voxgate.kernels.snake"))
    finally:
        if old is None:
            del os.environ["TRITON_INTERPRET"]
        else:
            os.environ["TRITON_INTERPRET"] = old


DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.mark.parametrize(("dtype", "atol"), [
    (torch.float32, 1e-5),
    # bf16 output: both round the same fp32 value, but sin() may differ by an fp32 ulp, flipping a rounding
    (torch.bfloat16, 2 ** -7),
])
@pytest.mark.parametrize("shape", [(2, 3, 40), (1, 96, 24), (3, 5, 1), (2, 7, 1031)])  # weird sizes; > one block
def test_snake_matches_reference(snake_mod: ModuleType, shape: tuple[int, int, int], dtype: torch.dtype,
                                 atol: float) -> None:
    x = (3 * torch.randn(shape)).to(dtype).to(DEVICE)
    alpha = torch.randn(shape[1]).exp().to(DEVICE)
    inv_beta = 1.0 / (torch.randn(shape[1]).exp() + 1e-9).to(DEVICE)
    got, want = snake_mod.snake(x, alpha, inv_beta), snake_mod.snake_ref(x, alpha, inv_beta)
    assert got.dtype == dtype and got.shape == x.shape
    torch.testing.assert_close(got.float(), want.float(), atol=atol, rtol=atol)


def test_stream_with_fused_snake_equals_whole(snake_mod: ModuleType, tiny_ckpt: Callable[[str], Path],
                                              no_tf32: None) -> None:
    """The kernel wired into CodecStream (fp32): streamed audio stays within 1 LSB of the whole decode."""
    from voxgate.engine.qwen3tts.checkpoint import load_codec
    from voxgate.engine.qwen3tts.codec_stream import CodecStream

    codec = load_codec(tiny_ckpt("cv17"), device=DEVICE)
    cs = CodecStream(codec, num_slots=2, fused_snake=True)
    assert cs.fused_snake, cs.fused_snake_error
    codes = torch.randint(0, 2048, (4, 16), generator=torch.Generator().manual_seed(3))
    got, want = cs.decode_chunks(codes, [1, 3]), codec.decode(codes)
    assert int(((got - want).abs() * 32767).max().ceil()) <= 1

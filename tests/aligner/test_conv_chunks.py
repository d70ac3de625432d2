"""batch.conv_chunks (the first conv as one matmul over 3x3 patches, channels-last, its mask folded into the patches)
against the plain three convs of AudioEncoder.embed_chunks, each chunk alone at its own width: on the CPU in fp32 at a
small width, and on CUDA (`gpu`) at the official aligner's 480 channels in fp32 and in bf16."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from voxgate.engine.aligner.audio_encoder import conv_frames, sinusoids
from voxgate.engine.aligner.batch import conv_chunks
from voxgate.engine.aligner.config import CHUNK_FRAMES


class Tower(torch.nn.Module):
    """The encoder's conv front at a given width (random weights, biases of the size trained ones have)."""

    def __init__(self, channels: int, mels: int = 128, d_model: int = 64) -> None:
        super().__init__()
        self.conv2d1 = torch.nn.Conv2d(1, channels, 3, 2, padding=1)
        self.conv2d2 = torch.nn.Conv2d(channels, channels, 3, 2, padding=1)
        self.conv2d3 = torch.nn.Conv2d(channels, channels, 3, 2, padding=1)
        self.conv_out = torch.nn.Linear(channels * conv_frames(mels), d_model, bias=False)
        for conv in (self.conv2d1, self.conv2d2, self.conv2d3):
            torch.nn.init.normal_(conv.bias, std=0.5)


def alone(tower: Tower, chunk: torch.Tensor, frames: int) -> torch.Tensor:
    """One chunk at its own width through the plain convs (AudioEncoder.embed_chunks' ops): [conv_frames, d]."""
    x = chunk[None, :, :, :frames]
    x = F.gelu(tower.conv2d3(F.gelu(tower.conv2d2(F.gelu(tower.conv2d1(x))))))
    n, c, f, t = x.shape
    return tower.conv_out(x.permute(0, 3, 1, 2).reshape(n, t, c * f))[0]


def check(tower: Tower, device: str, dtype: torch.dtype, seed: int, tol: float) -> None:
    g = torch.Generator().manual_seed(seed)
    tower = tower.to(device, dtype)
    # full chunks and short ones of every parity (a short chunk keeps only its frames), in random order
    limits = [CHUNK_FRAMES, CHUNK_FRAMES, 1, 2, 7, 8, 49, 50, 51, 99]
    limits += torch.randint(1, CHUNK_FRAMES + 1, (4,), generator=g).tolist()
    limits = [limits[i] for i in torch.randperm(len(limits), generator=g)]
    chunks = torch.randn(len(limits), 1, 128, CHUNK_FRAMES, generator=g).to(device, dtype)
    for i, m in enumerate(limits):
        chunks[i, :, :, m:] = 0  # zero-padded past its frames, as batch.py cuts them
    positions = sinusoids(conv_frames(CHUNK_FRAMES), tower.conv_out.out_features).to(device, dtype)
    with torch.inference_mode():
        got = conv_chunks(tower, chunks, torch.tensor(limits, device=device), positions)  # type: ignore[arg-type]
        for i, m in enumerate(limits):
            want = alone(tower, chunks[i], m) + positions[: conv_frames(m)]
            err = (got[i, : conv_frames(m)] - want).abs().max().item()
            assert err <= tol * max(1.0, want.abs().max().item()), (m, err)


@pytest.mark.parametrize("seed", range(3))
def test_conv_chunks_equals_each_chunk_alone_on_the_cpu(seed):
    torch.manual_seed(seed)
    check(Tower(16), "cpu", torch.float32, seed, 1e-5)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize(("dtype", "tol"), [(torch.float32, 1e-4), (torch.bfloat16, 3e-2)])
def test_conv_chunks_equals_each_chunk_alone_on_cuda_at_full_width(dtype, tol):
    """480 channels (the official aligner's); bf16 within its rounding of the same ops in another order."""
    tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        torch.manual_seed(0)
        check(Tower(480), "cuda", dtype, 0, tol)
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32

"""codec_runner.CodecRunner: bucket choice, padding, and equality with a direct step and with the whole decode
(CPU: the same buckets and padding, run eagerly through GraphSet; on CUDA each bucket is a captured graph)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from voxgate.engine.qwen3tts.bench.codec_runner import CodecRunner
from voxgate.engine.qwen3tts.codec.codec_stream import CodecStream
from voxgate.engine.qwen3tts.model.checkpoint import load_codec

from .test_codec_stream import _codes, assert_within_1_lsb

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
pytestmark = pytest.mark.usefixtures("no_tf32")  # fp32 comparisons: TF32 convs on CUDA round to 1e-3


@pytest.fixture(scope="module")
def stream(tiny_ckpt: Callable[[str], Path]) -> CodecStream:
    return CodecStream(load_codec(tiny_ckpt("cv17"), device=DEVICE), num_slots=6)


@pytest.mark.slow
def test_smallest_bucket_that_fits(stream: CodecStream) -> None:
    runner = CodecRunner(stream, [(4, 8), (2, 4), (4, 2)], progress=False)
    assert runner.bucket_for(1, 1) == (2, 4)  # 8 padded frame-rows, the cheapest (tied with 4 x 2)
    assert runner.bucket_for(3, 1) == (4, 2)
    assert runner.bucket_for(2, 3) == (2, 4)
    assert runner.bucket_for(3, 3) == (4, 8)
    with pytest.raises(ValueError, match="no codec bucket holds 5 rows x 1 frames"):
        runner.bucket_for(5, 1)


def test_bucket_wider_than_the_pool_is_refused(stream: CodecStream) -> None:
    with pytest.raises(ValueError, match=r"rows must be 1\.\.5"):
        CodecRunner(stream, [(6, 1)], progress=False)


@pytest.mark.slow
def test_runner_equals_direct_step(stream: CodecStream) -> None:
    """Two streams of different widths through the runner give the audio and state of one direct step."""
    runner = CodecRunner(stream, [(4, 8)], progress=False)
    slots = torch.tensor([stream.open(), stream.open()], device=DEVICE)
    try:
        g = torch.Generator().manual_seed(3)
        for widths in ([3, 1], [5, 5], [0, 2]):
            t = max(widths)
            codes = torch.randint(0, 2048, (2, t, 16), generator=g).to(DEVICE)
            n = torch.tensor(widths, device=DEVICE)
            before = stream.pool.data.clone()
            want = stream.step(slots, codes, n).clone()
            after = stream.pool.data.clone()
            stream.pool.data.copy_(before)
            got = runner(slots, codes, n)
            assert got.shape == want.shape
            for row, w in enumerate(widths):
                spf = stream.samples_per_frame
                # other shapes may take other conv algorithms: equal up to fp32 rounding (1 LSB of PCM16 is 3e-5)
                torch.testing.assert_close(got[row, : w * spf], want[row, : w * spf], atol=1e-5, rtol=0)
            # slot 0 is the sink
            for name, view in stream.pool.views.items():
                torch.testing.assert_close(view[1:], stream.pool.views_of(after)[name][1:], atol=1e-5, rtol=1e-5)
    finally:
        for s in slots.tolist():
            stream.close(s)


@pytest.mark.slow
def test_bucket_pads_rows_and_frames(stream: CodecStream) -> None:
    """A bucket of 4 rows x 8 frames serving 2 streams: one idles (0 frames, garbage codes in its row), padding rows
    sit on the sink; each stream's audio equals its whole decode."""
    runner = CodecRunner(stream, [(4, 8)], progress=False)
    a, b = _codes(6, 60), _codes(24, 61)
    slots = torch.tensor([stream.open(), stream.open()], device=DEVICE)
    try:
        out_a, out_b = [], []
        for k in range(3):
            na = 3 if k < 2 else 0  # stream a: two 3-frame chunks, then idle
            row_a = torch.cat([a[3 * k: 3 * k + na], _codes(8 - na, 70 + k)])
            codes = torch.stack([row_a, b[8 * k: 8 * k + 8]]).to(DEVICE)
            audio = runner(slots, codes, torch.tensor([na, 8], device=DEVICE))
            assert audio.shape == (2, 8 * 1920)
            out_a.append(audio[0, : na * 1920].cpu())
            out_b.append(audio[1].cpu())
        codec = stream.codec
        assert_within_1_lsb(torch.cat(out_a), codec.decode(a.to(DEVICE)).cpu())
        assert_within_1_lsb(torch.cat(out_b), codec.decode(b.to(DEVICE)).cpu())
    finally:
        for s in slots.tolist():
            stream.close(s)

"""encoder_graphs.CapturedEncoder against batch.encode_batch and each clip alone, on the tiny checkpoint in fp32:
on the CPU its bucketed path without graphs (the static buffers, index copies and padding a CUDA graph replays),
call after call through the same buffers; on CUDA (`gpu`) the real graphs on a side stream."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from voxgate.engine.aligner.align import Aligner
from voxgate.engine.aligner.audio_encoder import encoder_frames
from voxgate.engine.aligner.batch import chunk_lengths, encode_batch, window_lengths
from voxgate.engine.aligner.encoder_graphs import CapturedEncoder
from voxgate.engine.aligner.features import log_mel, log_mel_batch, peak_limited
from voxgate.engine.aligner.units import split_units

from .test_batch import random_batch
from .test_parity import assert_close


@pytest.fixture(scope="module")
def aligner(aligner_ckpt):
    return Aligner.from_pretrained(aligner_ckpt)


def features(clips: list[np.ndarray], device: str = "cpu") -> tuple[torch.Tensor, list[int]]:
    return log_mel_batch([torch.as_tensor(peak_limited(c), device=device) for c in clips])


def calls(clips: list[np.ndarray]) -> list[list[np.ndarray]]:
    """Batches of every regime through the same buffers: all clips, then in reverse (the same buckets, other
    windows in each row: what a call leaves behind must not leak into the next), one short chunk alone, an exact
    chunk beside a short one, one clip of several chunks, each clip of several windows, and all of them again."""
    by_length = sorted(clips, key=len)
    short, exact = by_length[0], next(c for c in clips if len(c) == 16_000)
    return [clips, clips[::-1], [short], [exact, by_length[1]], [by_length[3]], by_length[4:], clips]


@pytest.mark.parametrize("share", [True, False])
@pytest.mark.parametrize("seed", range(3))
def test_the_bucketed_encoder_equals_encode_batch_call_after_call(aligner, seed, share):
    """Windows packed into rows (the default) or a window a row (share False, kept to measure against)."""
    tower = aligner.thinker.audio_tower
    encoder = CapturedEncoder(tower, torch.device("cpu"), torch.float32, chunk_buckets=(4, 32), window_buckets=(2, 16))
    encoder.share = share
    assert encoder.rows == (13, 26)  # the tiny aligner's windows are two chunks
    encoder.capture(progress=False)
    padded = set()  # what was padded: chunks, windows, rows
    with torch.inference_mode():
        for clips in calls(random_batch(seed)[0]):
            mel, frames = features(clips)
            assert encoder.fits(frames)
            got, want = encoder(mel, frames), encode_batch(tower, mel, frames)
            assert_close(got, want)
            for m, alone in zip([log_mel(torch.from_numpy(peak_limited(c))) for c in clips],
                                got.split([encoder_frames(t) for t in frames]), strict=True):
                assert_close(alone, tower(m))
            chunks, windows = sum(len(chunk_lengths(t)) for t in frames), window_lengths(tower, frames)
            padded |= {"chunks"} if chunks not in (4, 32) else set()
            padded |= {"windows"} if len(windows) not in (2, 16) else set()
            padded |= {"rows"} if max(windows) not in (13, 26) or min(windows) < max(windows) else set()
    assert padded == {"chunks", "windows", "rows"}


def test_a_call_that_fits_no_bucket_runs_encode_batch(aligner):
    tower = aligner.thinker.audio_tower
    encoder = CapturedEncoder(tower, torch.device("cpu"), torch.float32, chunk_buckets=(4,), window_buckets=(2,))
    encoder.capture(progress=False)
    clips = random_batch(1)[0]
    with torch.inference_mode():
        for batch in (clips, sorted(clips, key=len)[:3]):  # too many chunks; few enough chunks, but three windows
            mel, frames = features(batch)
            assert not encoder.fits(frames)
            assert_close(encoder(mel, frames), encode_batch(tower, mel, frames))


class Counted:
    def __init__(self, encoder: CapturedEncoder) -> None:
        self.encoder, self.calls = encoder, 0

    def __call__(self, mel: torch.Tensor, frames: list[int]) -> torch.Tensor:
        self.calls += 1
        return self.encoder(mel, frames)


def test_the_aligner_runs_its_captured_encoder(aligner_ckpt):
    """Aligner.capture(encoder_graphs=True) with the default buckets: unit times of every clip as alone, and logits
    as with the eager encoder, through the captured encoder."""
    aligner = Aligner.from_pretrained(aligner_ckpt)
    clips, texts = random_batch(4)
    units = [[u.text for u in split_units(t)] for t in texts]
    want_logits = aligner.logits_batch(clips, units)[1]
    aligner.capture(progress=False, encoder_graphs=True)
    assert aligner.encoder is not None and not aligner.encoder.graphs.use_graphs
    counted = aligner.encoder = Counted(aligner.encoder)  # type: ignore[assignment]
    assert aligner.unit_times_batch(clips, texts) == [aligner.unit_times(c, t) for c, t in zip(clips, texts,
                                                                                                 strict=True)]
    assert_close(aligner.logits_batch(clips, units)[1], want_logits)
    assert counted.calls == 2


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_the_captured_encoder_on_cuda_equals_the_eager_one(aligner_ckpt):
    """engine option aligner_encoder_graphs: the encoder replayed from real CUDA graphs on a side stream, as the
    worker runs it, against encode_batch on the same GPU (fp32, TF32 off): call after call, then the unit times;
    and the worker captures them on its thread when asked."""
    from voxgate.engine.aligner.worker import AlignerWorker

    tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        aligner = Aligner.from_pretrained(aligner_ckpt, device="cuda")
        tower = aligner.thinker.audio_tower
        clips, texts = random_batch(1)
        with torch.inference_mode():
            batches = [features(b, "cuda") for b in calls(clips)]
            eager = [encode_batch(tower, mel, frames) for mel, frames in batches]
            times = aligner.unit_times_batch(clips, texts)
            side = torch.cuda.Stream()
            with torch.cuda.stream(side):
                aligner.capture(progress=False, decoder_graphs=False, encoder_graphs=True)
                assert aligner.encoder is not None and aligner.encoder.graphs.use_graphs
                for _ in range(2):
                    for (mel, frames), want in zip(batches, eager, strict=True):
                        assert aligner.encoder.fits(frames)
                        assert_close(aligner.encoder(mel, frames).cpu(), want.cpu())
                assert aligner.unit_times_batch(clips, texts) == times
        worker = AlignerWorker(Aligner.from_pretrained(aligner_ckpt, device="cuda"), warmup=True,
                               encoder_graphs=True)
        try:
            assert worker._warmed.wait(300)
            assert worker.aligner.encoder is not None and worker.aligner.encoder.graphs.use_graphs
            assert worker.aligner.captured is None  # graphs=False: the decoder stays eager
        finally:
            worker.close()
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32

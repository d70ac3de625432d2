"""The batched aligner (engine/aligner/batch.py) against the one-clip path, clip by clip, on the tiny checkpoint in
fp32 on the CPU: clips of mixed lengths (one short chunk, an exact chunk, several chunks with a short last one,
several attention windows) and mixed texts in one call."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
from voxgate.engine.aligner.align import CALL_PARTS, HOST_PARTS, Aligner
from voxgate.engine.aligner.audio_encoder import encoder_frames
from voxgate.engine.aligner.batch import encode_batch
from voxgate.engine.aligner.features import clips_on_device, log_mel, log_mel_batch, peak_limited
from voxgate.engine.aligner.units import split_units

from .clips import clip
from .test_parity import TEXTS, assert_close

WORDS = ["Hello,", "world!", "It's", "a", "test.", "你好", "世界！", "天气很好。", "混合", "text", "123", "(really?)",
         "naïve", "rock'n'roll", "--", "$4.50"]


def random_batch(seed: int, rate: int = 16_000) -> tuple[list[np.ndarray], list[str]]:
    """Clips of random lengths in each regime (0.3-0.9 s: one short chunk; 1.0 s: one full chunk; 1.2-2.9 s:
    chunks of one window; 4.1-6.5 s: several windows) in a random order, each with a random text of 1-12 words."""
    rng = np.random.default_rng(seed)
    seconds = [rng.uniform(0.3, 0.9), rng.uniform(0.3, 0.9), 1.0, rng.uniform(1.2, 2.9), rng.uniform(4.1, 6.5),
               rng.uniform(4.1, 6.5)]
    rng.shuffle(seconds)
    clips = [clip(float(s), rate=rate, seed=seed * 10 + i, peak=float(rng.choice([0.3, 0.9, 1.7])))
             for i, s in enumerate(seconds)]
    texts = [" ".join(rng.choice(WORDS, size=int(rng.integers(1, 13)))) for _ in seconds]
    return clips, texts


@pytest.fixture(scope="module")
def ours(aligner_ckpt):
    return Aligner.from_pretrained(aligner_ckpt)


def test_the_batch_covers_every_regime(ours):
    frames = [len(c) // 160 for c in random_batch(0)[0]]
    sizes = [ours.thinker.audio_tower.window_size(t) for t in frames]
    assert min(frames) < 100 and 100 in frames
    assert any(encoder_frames(t) > s for t, s in zip(frames, sizes, strict=True))  # several windows
    assert len({t for t in frames if t < 100}) == 2  # two short chunks of different widths


@pytest.mark.parametrize("seed", range(3))
def test_features_match_one_clip_at_a_time(seed):
    clips = [torch.from_numpy(peak_limited(c)) for c in random_batch(seed)[0]]
    mel, frames = log_mel_batch(clips)
    for b, c in enumerate(clips):
        alone = log_mel(c)
        assert frames[b] == alone.shape[1]
        assert_close(mel[b, :, : frames[b]], alone, rtol=1e-5, atol=1e-5)
        assert not mel[b, :, frames[b]:].any()


def test_features_of_clips_in_other_dtypes_are_those_of_their_float32_values():
    """log_mel_batch casts the clips once after joining them: clips of mixed dtypes give exactly the features of
    their float32 values."""
    clips = [torch.from_numpy(peak_limited(c)) for c in random_batch(1)[0]]
    mixed = [c.to(dtype) for c, dtype in zip(clips, [torch.float64, torch.bfloat16, torch.float16] * 2, strict=True)]
    want, frames = log_mel_batch([c.float() for c in mixed])
    got, got_frames = log_mel_batch(mixed)
    assert got.dtype == torch.float32 and got_frames == frames
    assert torch.equal(got, want)


def test_features_of_the_shortest_clips_match_one_clip_at_a_time():
    # 201 samples is the least a clip may have (the reflect padding is 200 on each side); around one hop and one
    # window, and a long one beside them, so the short ones are right-padded far
    rng = np.random.default_rng(7)
    lengths = (201, 202, 399, 400, 401, 16_321)
    clips = [torch.from_numpy(rng.standard_normal(n).astype(np.float32) * 0.3) for n in lengths]
    mel, frames = log_mel_batch(clips)
    for b, c in enumerate(clips):
        assert frames[b] == len(c) // 160
        assert_close(mel[b, :, : frames[b]], log_mel(c), rtol=1e-5, atol=1e-5)
        assert not mel[b, :, frames[b]:].any()


def test_clips_go_over_peak_limited_and_whole():
    rng = np.random.default_rng(8)
    clips = [rng.standard_normal(n).astype(np.float32) * peak for n, peak in ((300, 0.2), (4_000, 3.0), (1, 0.5))]
    moved = clips_on_device(clips, torch.device("cpu"))
    assert [len(m) for m in moved] == [len(c) for c in clips]
    for m, c in zip(moved, clips, strict=True):
        assert m.dtype == torch.float32 and np.array_equal(m.numpy(), peak_limited(c))
    assert clips_on_device([], torch.device("cpu")) == []


@pytest.mark.parametrize("seed", range(3))
def test_encoder_matches_one_clip_at_a_time(ours, seed):
    mels = [log_mel(torch.from_numpy(peak_limited(c))) for c in random_batch(seed)[0]]
    frames = [m.shape[1] for m in mels]
    padded = torch.stack([torch.nn.functional.pad(m, (0, max(frames) - m.shape[1])) for m in mels])
    tower = ours.thinker.audio_tower
    with torch.inference_mode():
        out = encode_batch(tower, padded, frames).split([encoder_frames(t) for t in frames])
        for m, got in zip(mels, out, strict=True):
            assert_close(got, tower(m))


@pytest.mark.parametrize("seed", range(3))
def test_logits_match_one_clip_at_a_time(ours, seed):
    clips, texts = random_batch(seed)
    texts[:3] = TEXTS[0], TEXTS[2], TEXTS[3]  # English with punctuation, Chinese, mixed
    units = [[u.text for u in split_units(t)] for t in texts]
    ids, logits = ours.logits_batch(clips, units)
    assert ids.shape[0] == len(clips) and len({len(u) for u in units}) > 1
    for b, (c, u) in enumerate(zip(clips, units, strict=True)):
        alone_ids, alone = ours.logits(c, u)
        n = len(alone_ids)
        assert ids[b, :n].tolist() == alone_ids.tolist()
        assert (ids[b, n:] == ours.prompt.audio_end).all()
        assert_close(logits[b, :n], alone)


@pytest.mark.parametrize("seed", range(3))
def test_unit_times_match_one_clip_at_a_time(ours, seed):
    clips, texts = random_batch(seed)
    texts[:4] = TEXTS[0], TEXTS[2], TEXTS[3], "— … !"  # the last has no units: [] without a row in the batch
    got = ours.unit_times_batch(clips, texts)
    assert got == [ours.unit_times(c, t) for c, t in zip(clips, texts, strict=True)]
    assert got[3] == [] and all(got[:3])


def test_word_times_match_one_clip_at_a_time(ours):
    clips, texts = random_batch(5, rate=24_000)
    texts[1] = ""
    got = ours.align_batch(clips, texts)
    assert got == [ours.align(c, t) for c, t in zip(clips, texts, strict=True)]
    assert got[1] == [] and all(got[i] for i in range(len(texts)) if i != 1)


def test_a_calls_time_splits_into_its_parts(ours):
    """align_batch's time by part (CALL_PARTS, the worker's metric), each measured inside the call, and the thread's
    CPU time in the host's parts: a call that runs the network waits for it; one whose texts have no word runs
    nothing and waits for nothing."""
    clips, texts = random_batch(6, rate=24_000)
    start = time.perf_counter()
    ours.align_batch(clips, texts)
    wall = time.perf_counter() - start
    parts = ours.last_parts
    assert tuple(parts) == CALL_PARTS and all(v >= 0 for v in parts.values()) and sum(parts.values()) <= wall
    assert parts["prepare"] > 0 and parts["queue"] > 0
    host = sum(parts[p] for p in HOST_PARTS)  # the thread's CPU time in them: never more than their wall time
    assert 0 < ours.last_host_cpu <= host + 1e-3
    ours.align_batch([clip(1.0)], [""])
    assert tuple(ours.last_parts) == CALL_PARTS
    assert ours.last_parts["queue"] == ours.last_parts["gpu_wait"] == ours.last_parts["post"] == 0


def test_empty_and_mismatched_batches(ours):
    assert ours.unit_times_batch([clip(1.0)], [""]) == [[]]
    assert ours.unit_times_batch([], []) == []
    with pytest.raises(ValueError, match="2 clips for 1 texts"):
        ours.unit_times_batch([clip(1.0), clip(1.0)], ["a"])


@pytest.fixture(scope="module")
def packed(aligner_ckpt):
    return Aligner.from_pretrained(aligner_ckpt, decoder="packed")


@pytest.mark.parametrize("seed", range(4))
def test_the_packed_decoder_equals_the_padded_one(packed, seed):
    """hidden_packed (the fused stack over every prompt back to back, one KV slot a clip; the CUDA default) against
    hidden_batch (right-padded, the reference): every clip's real tokens' hidden states, and its unit times."""
    clips, texts = random_batch(seed)
    texts[:3] = TEXTS[0], TEXTS[2], TEXTS[3]
    units = [[u.text for u in split_units(t)] for t in texts]
    with torch.inference_mode():
        ids, hidden = packed._hidden_batch(clips, units)
        padded_ids, padded_hidden = packed._hidden_batch(clips, units, padded=True)
    lengths = [len(packed.prompt.ids(u, encoder_frames(len(c) // 160))) for c, u in zip(clips, units, strict=True)]
    assert ids.shape == (sum(lengths),) and hidden.shape[0] == sum(lengths)
    for b, (got_ids, got) in enumerate(zip(ids.split(lengths), hidden.split(lengths), strict=True)):
        n = lengths[b]
        assert got_ids.tolist() == padded_ids[b, :n].tolist()
        assert_close(got, padded_hidden[b, :n])
    assert packed.unit_times_batch(clips, texts) == [packed.unit_times(c, t) for c, t in zip(clips, texts, strict=True)]


def test_the_decoder_is_chosen_by_device_or_named(aligner_ckpt, ours):
    assert ours.decoder == "padded" and ours.stack is None  # CPU: the fused stack's CPU attention is the slow one
    with pytest.raises(ValueError, match="packed, padded or auto"):
        Aligner.from_pretrained(aligner_ckpt, decoder="fused")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("prefill", [False, True])
@pytest.mark.parametrize("seed", range(2))
def test_the_packed_decoder_on_cuda_equals_the_padded_one(aligner_ckpt, seed, prefill):
    """The CUDA default: the fused stack with its Triton kernels (fp32, TF32 off), its attention a token at a time
    or a block of a clip's tokens at a time, against the padded reference on the same GPU."""
    torch.backends.cuda.matmul.allow_tf32 = False
    aligner = Aligner.from_pretrained(aligner_ckpt, device="cuda")
    assert aligner.decoder == "packed"
    aligner.use_prefill_attention(prefill)
    clips, texts = random_batch(seed)
    units = [[u.text for u in split_units(t)] for t in texts]
    with torch.inference_mode():
        ids, hidden = aligner._hidden_batch(clips, units)
        padded_ids, padded_hidden = aligner._hidden_batch(clips, units, padded=True)
    real = torch.zeros_like(padded_ids, dtype=torch.bool)  # each clip's own tokens, not the padding
    for b, u in enumerate(units):
        real[b, : len(aligner.prompt.ids(u, encoder_frames(len(clips[b]) // 160)))] = True
    assert ids.tolist() == padded_ids[real].tolist()
    assert_close(hidden.float().cpu(), padded_hidden[real].float().cpu(), rtol=1e-4, atol=1e-4)
    assert aligner.unit_times_batch(clips, texts) == [aligner.unit_times(c, t) for c, t in zip(clips, texts,
                                                                                                 strict=True)]


@pytest.mark.parametrize("seed", range(3))
def test_the_bucketed_decoder_equals_the_packed_one(aligner_ckpt, seed):
    """decoder_graphs.CapturedDecoder's bucketed path (eager on the CPU: the padding, the sink slot and the shared
    store a CUDA graph replays) against the packed decoder: the same hidden states, call after call, and a call
    that does not fit runs the packed decoder as it is."""
    from voxgate.engine.aligner.decoder_graphs import CapturedDecoder

    aligner = Aligner.from_pretrained(aligner_ckpt, decoder="packed")
    clips, texts = random_batch(seed)
    units = [[u.text for u in split_units(t)] for t in texts]
    with torch.inference_mode():
        ids, plain = aligner._hidden_batch(clips, units)
        aligner.captured = CapturedDecoder(aligner.stack, aligner.thinker.model, torch.device("cpu"), torch.float32,
                                           buckets=(ids.shape[0] // 2, ids.shape[0] + 7), max_clips=8,
                                           max_positions=400)
        aligner.captured.capture(progress=False)
        for _ in range(2):  # the second call finds the first one's keys and values in the store
            bucketed_ids, bucketed = aligner._hidden_batch(clips, units)
            assert bucketed_ids.tolist() == ids.tolist()
            assert_close(bucketed, plain, rtol=1e-5, atol=1e-5)
        half = aligner._hidden_batch(clips[:2], units[:2])[1]  # a smaller bucket, the same store
        assert_close(half, plain[: half.shape[0]], rtol=1e-5, atol=1e-5)
        assert not aligner.captured.fits(ids.shape[0], 9, 10) and not aligner.captured.fits(ids.shape[0] + 8, 1, 10)
        aligner.captured.max_clips = 2  # too many clips: the packed decoder, unbucketed
        assert_close(aligner._hidden_batch(clips, units)[1], plain, rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("prefill", [False, True])
def test_the_captured_decoder_on_cuda_equals_the_eager_one(aligner_ckpt, prefill):
    """engine option aligner_graphs: the packed decoder replayed from real CUDA graphs on a side stream, as the
    worker runs it, against the same decoder eager (fp32, TF32 off): the same hidden states and unit times; with
    prefill attention too (engine option aligner_prefill_attention)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    aligner = Aligner.from_pretrained(aligner_ckpt, device="cuda")
    aligner.use_prefill_attention(prefill)
    clips, texts = random_batch(1)
    units = [[u.text for u in split_units(t)] for t in texts]
    with torch.inference_mode():
        ids, eager = aligner._hidden_batch(clips, units)
        times = aligner.unit_times_batch(clips, texts)
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            aligner.capture(progress=False)
            assert aligner.captured is not None and aligner.captured.graphs.use_graphs
            for _ in range(2):
                got_ids, got = aligner._hidden_batch(clips, units)
                assert got_ids.tolist() == ids.tolist()
                assert_close(got.float().cpu(), eager.float().cpu(), rtol=1e-5, atol=1e-5)
            assert aligner.unit_times_batch(clips, texts) == times


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_captured_call_on_cuda_queues_its_work_without_waiting(aligner_ckpt):
    """As the worker runs it (both graphs, a side stream), a call's network work is all queued before the host
    waits for any of it: no host-to-device copy or read in between makes the host wait for the kernels queued so
    far (torch's sync debug mode raises on one). Only reading the results waits, once."""
    aligner = Aligner.from_pretrained(aligner_ckpt, device="cuda")
    clips, texts = random_batch(2)
    units = [[u.text for u in split_units(t)] for t in texts]
    side = torch.cuda.Stream()
    with torch.inference_mode(), torch.cuda.stream(side):
        aligner.capture(progress=False, encoder_graphs=True)
        frames = [len(c) // 160 for c in clips]
        prompts = [aligner.prompt.ids(u, encoder_frames(t)) for u, t in zip(units, frames, strict=True)]
        assert aligner.encoder is not None and aligner.encoder.fits(frames)  # else the eager paths, which wait
        assert aligner.captured is not None and aligner.captured.fits(sum(map(len, prompts)), len(prompts),
                                                                       max(map(len, prompts)))
        aligner._hidden_batch(clips, units)  # the first call pins its host buffers
        torch.cuda.set_sync_debug_mode("error")
        try:
            aligner._hidden_batch(clips, units)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        side.synchronize()


@pytest.mark.parametrize("seed", range(2))
def test_prefill_attention_in_the_packed_decoder_equals_a_token_at_a_time(aligner_ckpt, seed):
    """engine option aligner_prefill_attention: the packed decoder's attention by blocks of a clip's tokens
    (kernels/prefill_attention.py in Triton's interpreter: an online softmax, so fp32 rounding differs slightly
    through the layers) against the per-token one, eager and through the
    bucketed decoder (its block table per bucket, refilled call after call); off CUDA and uninterpreted it is
    refused."""
    from triton_mode import DEVICE, kernel_module
    from voxgate.engine.aligner.decoder_graphs import CapturedDecoder

    if DEVICE == "cuda":
        pytest.skip("the CUDA run is test_the_packed_decoder_on_cuda_equals_the_padded_one")
    kernel_module("prefill_attention")
    clips, texts = random_batch(seed)
    units = [[u.text for u in split_units(t)] for t in texts]
    aligner = Aligner.from_pretrained(aligner_ckpt, decoder="packed")
    with torch.inference_mode():
        ids, plain = aligner._hidden_batch(clips, units)
        aligner.use_prefill_attention()
        assert_close(aligner._hidden_batch(clips, units)[1], plain)
        aligner.captured = CapturedDecoder(aligner.stack, aligner.thinker.model, torch.device("cpu"), torch.float32,
                                           buckets=(ids.shape[0] // 2, ids.shape[0] + 7), max_clips=8,
                                           max_positions=400, prefill=True)
        aligner.captured.capture(progress=False)
        for _ in range(2):
            assert_close(aligner._hidden_batch(clips, units)[1], plain)
        half = aligner._hidden_batch(clips[:2], units[:2])[1]  # a smaller bucket with its own table
        assert_close(half, plain[: half.shape[0]])


def test_prefill_attention_is_refused_where_it_cannot_run(ours, aligner_ckpt):
    with pytest.raises(ValueError, match="packed decoder on CUDA"):
        ours.use_prefill_attention()  # the padded decoder


def test_prompts_whose_slots_miss_the_encoder_frames_are_refused(packed):
    """The slots are counted on the host (no wait for the encoder); a prompt one slot short is refused, not
    scattered out of place."""
    from voxgate.engine.aligner.batch import hidden_packed

    clips, texts = random_batch(0)
    units = [[u.text for u in split_units(t)] for t in texts]
    mel, frames = log_mel_batch([torch.from_numpy(c) for c in clips])
    prompts = [packed.prompt.ids(u, encoder_frames(t)) for u, t in zip(units, frames, strict=True)]
    prompts[1].remove(packed.prompt.audio_pad)
    with torch.inference_mode(), pytest.raises(ValueError, match="audio slots for"):
        hidden_packed(packed.thinker, packed.stack, prompts, mel, frames)


def test_a_calls_clips_are_resampled_as_one_after_another():
    """align_batch's resampling on a few threads gives soxr's samples exactly, in order."""
    import soxr
    from voxgate.engine.aligner.align import INPUT_RATE, to_16k

    clips, _ = random_batch(3, rate=INPUT_RATE)
    got = to_16k(clips)
    assert len(got) == len(clips)
    for clip_24k, clip_16k in zip(clips, got, strict=True):
        np.testing.assert_array_equal(clip_16k, soxr.resample(clip_24k, INPUT_RATE, 16_000))
    assert to_16k([]) == []

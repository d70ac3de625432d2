"""Incremental codec decode (codec_stream.py, the plain reference) equals the whole-utterance decode (codec.py)
within 1 LSB of PCM16.

fp32 with TF32 off, on the tiny synthetic checkpoint (2 transformer layers, window 72: its receptive field is
2 x 71 frames, so 100 frames already leave the window and 310 frames leave the whole transformer history).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from voxgate.engine.qwen3tts.bench.codec_measure import pcm16, snr_db

if TYPE_CHECKING:
    from voxgate.engine.qwen3tts.codec.codec import CodecDecoder
    from voxgate.engine.qwen3tts.codec.codec_stream import CodecStream

Q = 16  # codebooks
pytestmark = pytest.mark.usefixtures("no_tf32")


@pytest.fixture(scope="module", autouse=True)
def _one_thread() -> Iterator[None]:
    """Tiny shapes gain nothing from intra-op threads, and on a busy 2-core runner OpenMP's spinning barriers made
    this file 10x slower (186 s vs 16 s measured at load 7)."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture(scope="module")
def codec(tiny_ckpt: Callable[[str], Path]) -> CodecDecoder:
    from voxgate.engine.qwen3tts.model.checkpoint import load_codec

    return load_codec(tiny_ckpt("cv17"), dtype=torch.float32)


@pytest.fixture(scope="module")
def stream(codec: CodecDecoder) -> CodecStream:
    from voxgate.engine.qwen3tts.codec.codec_stream import CodecStream

    return CodecStream(codec, num_slots=6)


def _codes(frames: int, seed: int) -> torch.Tensor:
    return torch.randint(0, 2048, (frames, Q), generator=torch.Generator().manual_seed(seed))


def assert_within_1_lsb(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.shape == want.shape
    diff = (pcm16(got) - pcm16(want)).abs()
    worst = int(diff.argmax())
    assert int(diff.max()) <= 1, (f"{int((diff > 1).sum())} samples off by > 1 LSB; worst at {worst}: "
                                  f"{float(got[worst]):.6f} vs {float(want[worst]):.6f}")


_WHOLE: dict[tuple[int, int], torch.Tensor] = {}


def _whole(codec: CodecDecoder, frames: int, seed: int) -> torch.Tensor:
    if (frames, seed) not in _WHOLE:
        _WHOLE[(frames, seed)] = codec.decode(_codes(frames, seed))
    return _WHOLE[(frames, seed)]


@pytest.mark.slow
@pytest.mark.parametrize("schedule", [[1], [3], [4], [8], [16], [4, 8, 16], [1, 3, 8, 16], [5, 1, 16, 2, 7, 4, 11]])
def test_chunks_equal_whole_decode(codec: CodecDecoder, stream: CodecStream, schedule: list[int]) -> None:
    whole = _whole(codec, 100, 1)  # > 72 frames: keys fall out of the window
    assert_within_1_lsb(stream.decode_chunks(_codes(100, 1), schedule), whole)


@pytest.mark.slow
@settings(max_examples=6, deadline=None)
@given(frames=st.integers(1, 90), schedule=st.lists(st.integers(1, 17), min_size=1, max_size=8),
       seed=st.integers(0, 2**16))
def test_any_schedule_equals_whole_decode(codec: CodecDecoder, stream: CodecStream, frames: int,
                                          schedule: list[int], seed: int) -> None:
    codes = _codes(frames, seed)
    assert_within_1_lsb(stream.decode_chunks(codes, schedule), codec.decode(codes))


@pytest.mark.slow
@pytest.mark.parametrize("schedule", [[4, 8, 16], [3]])
def test_long_utterance_equals_whole_decode(codec: CodecDecoder, stream: CodecStream, schedule: list[int]) -> None:
    whole = _whole(codec, 310, 2)  # > 300 frames: past the reference's own 300-frame chunk
    got = stream.decode_chunks(_codes(310, 2), schedule)
    assert_within_1_lsb(got, whole)
    assert float(whole[-1920:].abs().max()) > 0.01  # the tail is real audio, not silence


@pytest.mark.slow
def test_interleaved_batch_equals_each_alone(codec: CodecDecoder) -> None:
    """Streams of different lengths and chunk widths share steps (with a sink row and idle rows)."""
    from voxgate.engine.qwen3tts.codec.codec_stream import CodecStream

    cs = CodecStream(codec, num_slots=5)
    lengths, schedules = [90, 37, 75, 12], [[4, 8, 16], [1, 3], [16], [2, 5]]
    codes = [_codes(n, 10 + i) for i, n in enumerate(lengths)]
    alone = [cs.decode_chunks(c, s) for c, s in zip(codes, schedules, strict=True)]
    slots = [cs.open() for _ in lengths]
    pos, k, out = [0] * 4, [0] * 4, [[] for _ in lengths]
    step = 0
    while any(p < n for p, n in zip(pos, lengths, strict=True)):
        rows = []
        for i in range(4):
            if pos[i] >= lengths[i] or (i == 2 and step % 3 == 1):  # stream 2 sits out some steps
                continue
            w = min(schedules[i][min(k[i], len(schedules[i]) - 1)], lengths[i] - pos[i])
            rows.append((i, w))
        width = max(w for _, w in rows)
        batch_codes = torch.zeros(len(rows) + 2, width, Q, dtype=torch.long)
        batch_slots = torch.zeros(len(rows) + 2, dtype=torch.long)  # two padding rows on the sink
        num = torch.zeros(len(rows) + 2, dtype=torch.long)
        num[-1] = width  # a padding row may claim frames: it only writes the sink
        for r, (i, w) in enumerate(rows):
            batch_codes[r, :w] = codes[i][pos[i]: pos[i] + w]
            batch_slots[r], num[r] = slots[i], w
        audio = cs.step(batch_slots, batch_codes, num)
        for r, (i, w) in enumerate(rows):
            out[i].append(audio[r, : w * 1920])
            pos[i], k[i] = pos[i] + w, k[i] + 1
        step += 1
    for i in range(4):
        assert_within_1_lsb(torch.cat(out[i]), alone[i])
        assert_within_1_lsb(alone[i], _whole(codec, lengths[i], 10 + i))


def test_reused_slot_carries_nothing(codec: CodecDecoder) -> None:
    from voxgate.engine.qwen3tts.codec.codec_stream import CodecStream

    cs = CodecStream(codec, num_slots=2)  # one usable slot: the second stream must reuse the first one's
    first = cs.decode_chunks(_codes(80, 20), [16])
    assert not cs.pool.can_allocate(2)
    slot = cs.open()
    assert (cs.pool.data[slot] == 0).all()
    cs.close(slot)
    second = cs.decode_chunks(_codes(50, 21), [4, 8])
    fresh = CodecStream(codec, num_slots=2).decode_chunks(_codes(50, 21), [4, 8])
    assert torch.equal(second, fresh)
    assert not torch.equal(first[: 50 * 1920], second)


def test_icl_warm_up_discards_reference_audio(codec: CodecDecoder, stream: CodecStream) -> None:
    ref, gen = _codes(30, 30), _codes(40, 31)
    whole = codec.decode(torch.cat([ref, gen]))[30 * 1920:]  # what the reference's ICL decode keeps
    assert_within_1_lsb(stream.decode_chunks(gen, [4, 8, 16], ref_codes=ref), whole)


def test_padding_code_is_read_as_zero_and_eos_is_refused(stream: CodecStream) -> None:
    codes = _codes(6, 40)
    padded, zeroed = codes.clone(), codes.clone()
    padded[:, 5], zeroed[:, 5] = -1, 0
    assert torch.equal(stream.decode_chunks(padded, [3]), stream.decode_chunks(zeroed, [3]))
    eos = codes.clone()
    eos[-1, 0] = 2150  # the Talker's EOS id is outside the codebook: callers must stop before it
    with pytest.raises(IndexError):
        stream.decode_chunks(eos, [6])
    assert stream.pool.num_free == stream.pool.max_streams  # the failed stream's slot was released


@pytest.mark.slow
def test_bf16_snr(codec: CodecDecoder) -> None:
    """bf16 with SnakeBeta and the clamp in fp32 stays close to fp32 (the bench reports 32 utterances)."""
    from voxgate.engine.qwen3tts.codec.codec_stream import CodecStream

    cs = CodecStream(codec, num_slots=2, dtype=torch.bfloat16)
    assert cs.pool["kv"].dtype == torch.bfloat16 and next(codec.parameters()).dtype == torch.float32
    snrs = [snr_db(cs.decode_chunks(_codes(40, 50 + i), [4, 8, 16]), _whole(codec, 40, 50 + i)) for i in range(3)]
    assert min(snrs) > 15.0, snrs


def test_state_size_at_real_shapes(shared: Path) -> None:
    """The per-stream state of the real 12 Hz decoder is design §9's 1,298,496 values."""
    from voxgate.engine.qwen3tts.codec.codec import CodecDecoder
    from voxgate.engine.qwen3tts.codec.codec_state import state_layout, state_values
    from voxgate.engine.qwen3tts.model.config import CodecDecoderConfig

    raw = json.loads((shared / "checkpoints/Qwen3-TTS-12Hz-1.7B-CustomVoice/speech_tokenizer/config.json").read_text())
    with torch.device("meta"):
        codec = CodecDecoder(CodecDecoderConfig.from_dict(raw["decoder_config"]))
    assert state_values(state_layout(codec, torch.bfloat16)) == 1_298_496


def test_config_without_a_stream_slot_is_refused(codec: CodecDecoder) -> None:
    from voxgate.engine.qwen3tts.codec.codec_stream import CodecStream
    from voxgate.engine.slot_pool import NoUsableSlot

    with pytest.raises(NoUsableSlot):
        CodecStream(codec, num_slots=1)


def test_swapped_snake_parameters_are_caught(codec: CodecDecoder) -> None:
    """A mutation check of this file's oracle: the reference stream with two residual units' SnakeBeta parameters
    exchanged (a wrong slice of 1-D parameters, which constant synthetic parameters would hide) is off by far more
    than 1 LSB."""
    from voxgate.engine.qwen3tts.codec.codec_stream import CodecStream

    cs = CodecStream(codec, num_slots=2)
    unit0, unit1 = list(codec.decoder[1].block)[2:4]
    a, b = cs.snakes[id(unit0.act1)], cs.snakes[id(unit1.act1)]
    assert not torch.equal(a.alpha, b.alpha) and not torch.equal(a.inv_beta, b.inv_beta)
    cs.snakes[id(unit0.act1)], cs.snakes[id(unit1.act1)] = b, a
    got = cs.decode_chunks(_codes(8, 3), [4])
    assert int((pcm16(got) - pcm16(_whole(codec, 8, 3))).abs().max()) > 30

"""codec_fused.FusedCodecStream against its reference, codec_stream.CodecStream, and the whole decode.

Tiny synthetic codec, CPU: the Triton kernels run in Triton's interpreter, which is slow, so the codec here has an
attention window of 8 frames instead of 72 (the key ring wraps within a few frames) and utterances stay short;
the H200 run (tests/gpu_check.sh) covers real shapes. fp32 with TF32 off.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest
import torch
from triton_mode import DEVICE, kernel_module
from voxgate.engine.qwen3tts.bench.codec_measure import pcm16, snr_db

from .test_codec_stream import _codes

pytest.importorskip("triton")
# Every test here builds a codec: seconds to minutes on CPU.
pytestmark = [pytest.mark.usefixtures("no_tf32"), pytest.mark.slow]


@pytest.fixture(scope="module", autouse=True)
def _one_thread() -> Iterator[None]:
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture(scope="module")
def fused() -> ModuleType:
    """codec_fused bound to kernel modules runnable here (the interpreter without a GPU)."""
    for name in ("causal_conv", "conv_tma", "codec_norms", "ring_attention", "swiglu", "gemv"):
        kernel_module(name)
    return importlib.reload(importlib.import_module("voxgate.engine.qwen3tts.codec.codec_fused"))


WINDOW = 8


@pytest.fixture(scope="module")
def codec(tiny_ckpt: Callable[[str], Path]):
    """The tiny synthetic codec's weights in a decoder whose attention window is WINDOW frames."""
    from voxgate.engine.qwen3tts.codec.codec import CodecDecoder
    from voxgate.engine.qwen3tts.model.checkpoint import load_codec

    tiny = load_codec(tiny_ckpt("cv17"), device=DEVICE, dtype=torch.float32)
    small = CodecDecoder(dataclasses.replace(tiny.cfg, sliding_window=WINDOW)).to(DEVICE)
    small.load_state_dict(tiny.state_dict())
    return small.eval()


def _whole(codec, frames: int, seed: int) -> torch.Tensor:
    return codec.decode(_codes(frames, seed).to(DEVICE))


def assert_within_1_lsb(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.shape == want.shape, (got.shape, want.shape)
    diff = (pcm16(got.cpu()) - pcm16(want.cpu())).abs()
    assert diff.numel() == 0 or int(diff.max()) <= 1, f"{int((diff > 1).sum())} samples off by > 1 LSB"


def test_state_matches_the_reference_layout(fused: ModuleType, codec) -> None:
    from voxgate.engine.qwen3tts.codec.codec_stream import CodecStream

    fs, ref = fused.FusedCodecStream(codec, 2), CodecStream(codec, 2)
    assert fs.state_values() == ref.state_values()
    assert fs.pool.slot_bytes == ref.pool.slot_bytes


@pytest.mark.parametrize("schedule", [[4, 8], [1, 3, 16]])
def test_streamed_equals_whole_decode(fused: ModuleType, codec, schedule: list[int]) -> None:
    """20 frames (the key ring of 7 wraps) in chunks, within 1 LSB of the whole decode."""
    fs = fused.FusedCodecStream(codec, 3)
    got = fs.decode_chunks(_codes(20, 5).to(DEVICE), schedule)
    assert_within_1_lsb(got, _whole(codec, 20, 5))


def test_interleaved_rows_equal_each_alone(fused: ModuleType, codec) -> None:
    """Rows with different widths, a 0-frame row and padding rows on the sink, in one step, over several steps;
    also checked against the reference stream fed the same batches."""
    from voxgate.engine.qwen3tts.codec.codec_stream import CodecStream

    fs, ref = fused.FusedCodecStream(codec, 5), CodecStream(codec, 5)
    streams = {2: _codes(12, 1).to(DEVICE), 4: _codes(12, 2).to(DEVICE), 1: _codes(12, 3).to(DEVICE)}
    done = dict.fromkeys(streams, 0)
    out: dict[int, list[torch.Tensor]] = {s: [] for s in streams}
    widths = [(1, 2, 0), (3, 0, 2), (2, 4, 4), (4, 1, 3)]
    for step in widths:
        slots = torch.tensor([2, 4, 1, 0], device=DEVICE)  # a padding row on the sink
        t = max(step)
        codes = torch.zeros(4, t, 16, dtype=torch.long, device=DEVICE)
        for row, (slot, w) in enumerate(zip((2, 4, 1), step, strict=True)):
            codes[row, :w] = streams[slot][done[slot]: done[slot] + w]
        n = torch.tensor([*step, 0], device=DEVICE)
        a, b = fs.step(slots, codes, n), ref.step(slots, codes, n)
        for row, (slot, w) in enumerate(zip((2, 4, 1), step, strict=True)):
            spf = fs.samples_per_frame
            out[slot].append(a[row, : w * spf])
            assert_within_1_lsb(a[row, : w * spf], b[row, : w * spf])
            done[slot] += w
    for slot, codes in streams.items():
        alone = fused.FusedCodecStream(codec, 2).decode_chunks(codes[: done[slot]], [16])
        assert_within_1_lsb(torch.cat(out[slot]), alone)


def test_reused_slot_carries_nothing(fused: ModuleType, codec) -> None:
    fs = fused.FusedCodecStream(codec, 2)  # one usable slot: the second stream reuses it
    fs.decode_chunks(_codes(12, 8).to(DEVICE), [16])
    assert_within_1_lsb(fs.decode_chunks(_codes(10, 9).to(DEVICE), [4, 8]), _whole(codec, 10, 9))


def test_icl_warm_up_discards_reference_audio(fused: ModuleType, codec) -> None:
    fs = fused.FusedCodecStream(codec, 2)
    ref, gen = _codes(9, 10), _codes(6, 11)
    got = fs.decode_chunks(gen.to(DEVICE), [8], ref_codes=ref.to(DEVICE))
    whole = codec.decode(torch.cat([ref, gen]).to(DEVICE))
    assert_within_1_lsb(got, whole[9 * fs.samples_per_frame:])


def test_long_reference_warms_in_steps(fused: ModuleType, codec, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reference longer than one step allows warms in several steps, with the same audio after it; a wider
    step is refused with a clear error."""
    fs = fused.FusedCodecStream(codec, 2)
    monkeypatch.setattr(fs, "max_step_frames", 4)
    ref, gen = _codes(9, 13), _codes(3, 14)
    got = fs.decode_chunks(gen.to(DEVICE), [3], ref_codes=ref.to(DEVICE))
    whole = codec.decode(torch.cat([ref, gen]).to(DEVICE))
    assert_within_1_lsb(got, whole[9 * fs.samples_per_frame:])
    with pytest.raises(ValueError, match="at most 4 new frames"):
        fs.step(torch.tensor([1], device=DEVICE), _codes(5, 1)[None].to(DEVICE), torch.tensor([5], device=DEVICE))


def _counted_gemv() -> tuple[object, list[int]]:
    """small_gemm's FewRows on kernels/gemv.py (as the engine builds it for `codec_gemm = gemv`), and the row
    counts of the calls its kernels took."""
    from voxgate.engine.qwen3tts.small_gemm import FewRows

    gemv = kernel_module("gemv")
    rows: list[int] = []

    def counted(fn: Callable) -> Callable:
        def call(*args, **kwargs):
            rows.append(args[1].shape[0] if fn is gemv.gemv_add_ else args[0].shape[0])
            return fn(*args, **kwargs)
        return call
    return FewRows(counted(gemv.gemv), gemv.MAX_ROWS, counted(gemv.gemv_add_), fast=gemv.fast,
                   gemv_swiglu=counted(gemv.gemv_swiglu)), rows


@pytest.mark.parametrize("schedule", [[4, 8], [1, 3, 20]])
def test_gemv_projections_equal_the_whole_decode(fused: ModuleType, codec, schedule: list[int]) -> None:
    """The transformer's projections through kernels/gemv.py, norms folded: within 1 LSB of the whole decode. A
    call of 20 frames (20 rows, above the kernel's 16) runs the folded weights through F.linear instead."""
    linear, rows = _counted_gemv()
    fs = fused.FusedCodecStream(codec, 3, linear=linear)
    got = fs.decode_chunks(_codes(24, 6).to(DEVICE), schedule)
    assert_within_1_lsb(got, _whole(codec, 24, 6))
    widths, left = [], 24
    while left:
        widths.append(min(schedule[min(len(widths), len(schedule) - 1)], left))
        left -= widths[-1]
    narrow = [w for w in widths if w <= 16]
    # each narrow call: in_proj, then a layer's q|k|v, o, gate|up and down, then out_proj
    per_call = 2 + 4 * len(codec.pre_transformer.layers)
    assert sorted(rows) == sorted(narrow * per_call), (rows, widths)


def test_gemv_projections_take_four_launches_a_layer_off(fused: ModuleType, codec,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A 1 x 4 call's launches counted from the code (aten ops that launch a kernel, and each Triton kernel once):
    the gemv projections take 4 a layer off (9 -> 5: norm, q|k|v, attention, o, norm, gate|up, SiLU, product, down
    against normed q|k|v, attention, o added, SwiGLU projection, down added); in_proj and out_proj stay one each.
    On the real codec (8 layers) that is 149 -> 117 (launch_count.py --codec)."""
    import triton.runtime.interpreter as interpreter
    from voxgate.engine.qwen3tts.bench.launch_count import LaunchCounter

    if DEVICE != "cpu":
        pytest.skip("counts the interpreter's launches")
    totals, ops = [], []
    for linear in (None, _counted_gemv()[0]):
        fs = fused.FusedCodecStream(codec, 2, linear=linear)
        slots, codes, n = torch.tensor([1]), _codes(4, 3)[None], torch.tensor([4])
        fs.step(slots, codes, n)
        counter = LaunchCounter()
        monkeypatch.setattr(interpreter.GridExecutor, "__call__",
                            counter.kernel("triton", interpreter.GridExecutor.__call__))
        with counter:
            fs.step(slots, codes, n)
        monkeypatch.undo()
        totals.append(counter.total)
        ops.append(counter.ops)
    assert totals[1] == totals[0] - 4 * len(codec.pre_transformer.layers), totals
    # RoPE's tables in one launch (kernels/ring_attention.py rope_rows), not from PyTorch's ops
    assert not {"aten.cos", "aten.sin", "aten.cat", "aten.pow"} & (set(ops[0]) | set(ops[1])), ops


def test_launch_count_counts_the_real_codecs_call(fused: ModuleType) -> None:
    """launch_count --codec (the real codec's structure, narrow widths): 149 launches a 1 x 4 call, 117 with the
    gemv projections (8 layers x 4), RoPE's tables one of them."""
    from voxgate.engine.qwen3tts.bench.launch_count import codec_launches

    if DEVICE != "cpu":
        pytest.skip("counts the interpreter's launches")
    cublas, gemv = codec_launches(), codec_launches(gemv=True)
    assert (sum(cublas.values()), sum(gemv.values())) == (149, 117), (cublas, gemv)
    assert "aten.cos" not in cublas and cublas["triton:triton"] == 80


def test_gemv_projections_interleave_rows(fused: ModuleType, codec) -> None:
    """Several rows of different widths in one call through the kernels (4 rows x 4 frames: 16 rows), each row
    within 1 LSB of its stream decoded alone on cuBLAS's path."""
    linear, rows = _counted_gemv()
    fs = fused.FusedCodecStream(codec, 5, linear=linear)
    streams = {slot: _codes(8, slot).to(DEVICE) for slot in (1, 2, 3, 4)}
    out: dict[int, list[torch.Tensor]] = {s: [] for s in streams}
    done = dict.fromkeys(streams, 0)
    for step in [(4, 1, 3, 0), (4, 4, 4, 4)]:
        codes = torch.zeros(4, 4, 16, dtype=torch.long, device=DEVICE)
        for row, (slot, w) in enumerate(zip(streams, step, strict=True)):
            codes[row, :w] = streams[slot][done[slot]: done[slot] + w]
        a = fs.step(torch.tensor(list(streams), device=DEVICE), codes, torch.tensor(step, device=DEVICE))
        for row, (slot, w) in enumerate(zip(streams, step, strict=True)):
            out[slot].append(a[row, : w * fs.samples_per_frame])
            done[slot] += w
    assert set(rows) == {16}
    for slot, codes in streams.items():
        alone = fused.FusedCodecStream(codec, 2).decode_chunks(codes[: done[slot]], [16])
        assert_within_1_lsb(torch.cat(out[slot]), alone)


@pytest.mark.skipif(DEVICE == "cuda", reason="on CUDA the refusal is a device-side assert, which ends the process's "
                    "CUDA context (every later test would fail): checked on the CPU")
def test_out_of_range_code_is_refused(fused: ModuleType, codec) -> None:
    fs = fused.FusedCodecStream(codec, 2)
    bad = _codes(2, 1)
    bad[1, 3] = fs.codebook_size  # e.g. an EOS id leaking into the codec
    with pytest.raises(RuntimeError):
        fs.decode_chunks(bad.to(DEVICE), [2])


def test_cpu_codec_without_the_interpreter_is_refused(fused: ModuleType, codec,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.import_module("voxgate.kernels.causal_conv"), "INTERPRETED", False)
    if DEVICE == "cpu":
        with pytest.raises(ValueError, match=r"need CUDA .* use CodecStream"):
            fused.FusedCodecStream(codec, 2)
    else:
        assert fused.FusedCodecStream(codec, 2).device.type == "cuda"


def test_bf16_quality_matches_the_reference_stream(fused: ModuleType, codec) -> None:
    """bf16: SNR against the fp32 whole decode close to the reference stream's bf16 SNR (same roundings where
    PyTorch rounds). Triton's CPU interpreter truncates to bf16 instead of rounding to nearest, a bias at every
    stored activation (measured here: 15.5 dB against the reference's 30.4 dB), so on the CPU this only catches
    gross errors; on CUDA the kernels round as PyTorch does and the bound is tight."""
    from voxgate.engine.qwen3tts.codec.codec_stream import CodecStream

    codes = _codes(16, 12)
    whole = _whole(codec, 16, 12)
    fs = fused.FusedCodecStream(codec, 2, dtype=torch.bfloat16)
    ref = CodecStream(codec, 2, dtype=torch.bfloat16)
    got = snr_db(fs.decode_chunks(codes.to(DEVICE), [4, 12]).cpu(), whole.cpu())
    want = snr_db(ref.decode_chunks(codes.to(DEVICE), [4, 12]).cpu(), whole.cpu())
    assert got > (want - 1.5 if DEVICE == "cuda" else 12.0), (got, want)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (a CUDA graph)")
def test_captured_step_replays_the_eager_step(fused: ModuleType, codec) -> None:
    """A CodecRunner bucket of the fused stream (a CUDA graph; padding rows on the sink) equals the eager step from
    the same state, bit for bit (fixed conv tiles: tuning could pick other tiles for the captured batch size)."""
    from voxgate.engine.qwen3tts.bench.codec_runner import CodecRunner
    from voxgate.kernels.causal_conv import ConvOptions

    fs = fused.FusedCodecStream(codec, 5, dtype=torch.bfloat16, conv_options=ConvOptions(autotune=False))
    slots = torch.tensor([1, 3], device=DEVICE)
    warm = torch.randint(0, 2048, (2, 9, 16), device=DEVICE)
    fs.step(slots, warm, torch.tensor([9, 5], device=DEVICE))
    runner = CodecRunner(fs, [(4, 4)], progress=False)
    assert runner.graphs.use_graphs
    codes = torch.randint(0, 2048, (2, 3, 16), device=DEVICE)
    n = torch.tensor([3, 2], device=DEVICE)
    before = fs.pool.data.clone()
    want = fs.step(slots, codes, n).clone()
    after = fs.pool.data.clone()
    fs.pool.data.copy_(before)
    got = runner(slots, codes, n)
    torch.cuda.synchronize()
    torch.testing.assert_close(got, want[:, : 3 * fs.samples_per_frame], atol=0, rtol=0)
    torch.testing.assert_close(fs.pool.data[1:], after[1:], atol=0, rtol=0)  # slot 0 is the sink


# -- mutation checks: a wrong slice or fold of a 1-D parameter must fail the comparison --------------------------

def _fold_gamma_out_of_the_bias(fs, codec) -> tuple[torch.Tensor, torch.Tensor]:
    """ConvNeXt's gamma folded into pwconv2's weight but not its bias."""
    right = fs.upsample[0]["pw2_bias"]
    fs.upsample[0]["pw2_bias"] = codec.upsample[0][1].pwconv2.bias.detach().to(right.dtype)
    return right, fs.upsample[0]["pw2_bias"]


def _interleave_the_convt_bias(fs, codec) -> tuple[torch.Tensor, torch.Tensor]:
    """A transposed conv's bias laid out per output sample (repeat_interleave) instead of per channel (repeat)."""
    blk = fs.blocks[1]
    right = blk.convt.bias
    blk.convt.bias = codec.decoder[2].block[1].conv.bias.detach().repeat_interleave(blk.stride).to(right.dtype)
    return right, blk.convt.bias


def _swap_the_layer_scales(fs, codec) -> tuple[torch.Tensor, torch.Tensor]:
    """LayerScale of the MLP folded into o_proj (attention's own scale left out)."""
    layer, w = codec.pre_transformer.layers[0], fs.layers[0]
    right = w["o_t"]
    w["o_t"] = (layer.mlp_layer_scale.scale[:, None] * layer.self_attn.o_proj.weight).T.detach().to(right.dtype)
    return right, w["o_t"]


def _swap_a_units_snakes(fs, codec) -> tuple[torch.Tensor, torch.Tensor]:
    """A residual unit's second SnakeBeta read with its first one's parameters."""
    unit = fs.blocks[0].units[0]
    right = unit.act2
    unit.act2 = fs.blocks[0].unit_acts[0]
    return torch.stack(right), torch.stack(unit.act2)


def _fold_the_wrong_norm(fs, codec) -> tuple[torch.Tensor, torch.Tensor]:
    """The gemv path's q|k|v folded, in every layer, with the post-attention norm's weight instead of the input
    norm's (one layer's alone moves a frame by at most 1 LSB here)."""
    right = fs.layers[0]["qkv"]
    for layer, w in zip(codec.pre_transformer.layers, fs.layers, strict=True):
        a = layer.self_attn
        qkv = torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]).float()
        w["qkv"] = (qkv * layer.post_attention_layernorm.weight.float()).detach().to(right.dtype)
    return right, fs.layers[0]["qkv"]


_fold_the_wrong_norm.folded = True  # mutates the stream built with small_gemm's kernel


@pytest.mark.parametrize("mutate", [_fold_gamma_out_of_the_bias, _interleave_the_convt_bias, _swap_the_layer_scales,
                                    _swap_a_units_snakes, _fold_the_wrong_norm])
def test_a_wrong_fold_is_caught(fused: ModuleType, codec, mutate: Callable) -> None:
    """The fused stream with one deliberately wrong fold of 1-D parameters differs from the whole decode by more
    than 1 LSB (the comparison every test above makes). With the old synthetic checkpoints (biases 0, norm weights
    and SnakeBeta parameters constant, gamma and LayerScale constant) each mutated tensor equalled the right one,
    so all four passed; the first assert checks that this checkpoint tells them apart."""
    fs = fused.FusedCodecStream(codec, 2, linear=_counted_gemv()[0] if getattr(mutate, "folded", False) else None)
    right, wrong = mutate(fs, codec)
    assert not torch.equal(right, wrong)
    got = fs.decode_chunks(_codes(1, 21).to(DEVICE), [1])  # one frame: the interpreter is slow
    diff = (pcm16(got.cpu()) - pcm16(_whole(codec, 1, 21).cpu())).abs()
    assert int(diff.max()) > 1, int(diff.max())

"""The batched engine loop on the H200 at the real 1.7B shapes (`gpu` marker; skipped without CUDA): captured
steps against each stream alone, teacher forced in fp32 (TF32 off), and free-running in bf16 (reported).

The checkpoint is written once (or taken from $VOXGATE_GPU_CKPT); results go to $VOXGATE_GPU_RESULTS as JSON.
"""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from voxgate.engine.qwen3tts.runner_config import pdl_works

from .loop_support import Stream, drive, make_runner, solo_codes, solo_logits

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
]

TEXTS = ["Hello there, this is the first stream.", "Second.", "A third stream joins a little later on.",
         "Four.", "The fifth one is cancelled half way.", "Six, the last."]
REAL = dict(row_buckets=(1, 2, 4, 8), prefill_buckets=(64,), max_positions=256, max_trailing=64,
            codec_buckets=((1, 1), (8, 1), (8, 4), (4, 16)))


def _record(name: str, result: dict[str, object]) -> None:
    if os.environ.get("VOXGATE_GPU_RESULTS"):
        (Path(os.environ["VOXGATE_GPU_RESULTS"]) / f"{name}.json").write_text(json.dumps(result, indent=2))


def _streams() -> list[Stream]:
    rng = np.random.default_rng(3)
    streams = [Stream(t, budget=int(rng.integers(8, 20)), join_step=int(rng.integers(0, 8)),
                      speaker=("ryan", "vivian")[i % 2], non_streaming=bool(i % 2), schedule=((1, 2, 4), (4,))[i % 2])
               for i, t in enumerate(TEXTS)]
    streams[4].cancel_step = streams[4].join_step + 5
    return streams


@pytest.mark.parametrize("graphs,kernels,depth,small_gemm,fold_norms,pdl,fuse", [
    (True, "triton", "layers", "cublas", None, "off", False), (False, "triton", "layers", "cublas", None, "off", False),
    (True, "torch", "layers", "cublas", None, "off", False), (True, "triton", "fused", "cublas", None, "off", False),
    (True, "triton", "layers", "gemv_all", None, "off", False),
    (True, "triton", "persistent", "cublas", None, "off", False),
    (True, "triton", "layers", "cublas", False, "off", False),
    (True, "triton", "layers", "gemv_all", None, "auto", False),
    (False, "triton", "layers", "gemv", None, "auto", False), (True, "triton", "layers", "cublas", False, "off", True),
    (True, "triton", "layers", "gemv_all", None, "auto", True),
    (True, "triton", "layers", "gemv_all+lanes", None, "auto", True)],
    ids=["graphs-triton", "eager-triton", "graphs-torch", "graphs-triton-fused", "graphs-triton-gemv",
         "graphs-triton-persistent", "graphs-triton-unfolded", "graphs-triton-gemv-pdl", "eager-triton-gemv-pdl",
         "graphs-triton-unfolded-fused-attention", "graphs-triton-gemv-pdl-fused-attention",
         "graphs-triton-gemv-lanes-pdl-fused-attention"])
def test_teacher_forced_logits_at_real_shapes_fp32(ckpt17: Path, graphs: bool, kernels: str, depth: str,
                                                   small_gemm: str, fold_norms: bool | None, pdl: str,
                                                   fuse: bool) -> None:
    """Every row's fp32 logits of every codebook within 1e-4 (relative) of the stream alone through the eager
    path, teacher-forced; the reference logits are taken before the runner is built (fold_norms changes the
    model's weights in place, not its function). small_gemm "gemv_all+lanes": gemv_all with gemv_layout = lanes
    and the Talker's 2-16 rows through the kernel too (gemv_talker_rows = 16)."""
    from voxgate.engine.qwen3tts.model.generate import Qwen3TTS

    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        tts = Qwen3TTS.from_pretrained(ckpt17, device="cuda", dtype="fp32", progress=False)
        streams = _streams()
        alone = {id(s): solo_codes(tts, s) for s in streams}
        solo = {id(s): solo_logits(tts, s, alone[id(s)]) for s in streams}
        # the plain codec: this test compares logits, not audio (and spares the fp32 kernels' tuning)
        fold = {} if fold_norms is None else {"fold_norms": fold_norms}  # None: the engine's default
        small_gemm, _, layout = small_gemm.partition("+")
        lanes = {"gemv_layout": "lanes", "gemv_talker_rows": 16} if layout == "lanes" else {}
        runner = make_runner(tts, num_slots=8, record_logits=True, codec="reference", attention=kernels,
                             depth=depth, small_gemm=small_gemm, gemv_rows=16, pdl=pdl, enforce_eager=not graphs,
                             fuse_attention=fuse, **fold, **lanes, **REAL)
        assert (runner.ops.attend_new is not None) == fuse
        assert runner.steps.use_graphs == graphs
        assert runner.pdl == (pdl == "auto" and pdl_works(torch.device("cuda")))
        recorder = drive(tts, runner, streams, greedy=False, max_rows=8, forced=lambda s: alone[id(s)])
        worst, per_stream = 0.0, []
        for s in streams:
            got = recorder.logits[s.codes_id]
            want = solo[id(s)][: len(got)]
            first_bad, stream_worst = None, 0.0
            for f, (frame_got, frame_want) in enumerate(zip(got, want, strict=True)):
                for k, (g, w) in enumerate(zip(frame_got, frame_want, strict=True)):
                    g, w = g.float().cpu(), w.float().cpu()
                    assert torch.equal(torch.isinf(g), torch.isinf(w)), (f, k)
                    finite = torch.isfinite(w)
                    rel = float((g[finite] - w[finite]).abs().max() / w[finite].abs().max())
                    stream_worst = max(stream_worst, rel)
                    if rel >= 1e-4 and first_bad is None:
                        first_bad = (f, k)
            worst = max(worst, stream_worst)
            per_stream.append({"join_step": s.join_step, "cancel_step": s.cancel_step, "frames": len(got),
                               "worst_rel": stream_worst, "first_bad_frame_codebook": first_bad})
        gemm = ("" if small_gemm == "cublas" else f"_{small_gemm}") + ("_unfolded" if fold_norms is False else "") \
            + ("_lanes" if layout else "") + ("_pdl" if runner.pdl else "") + ("_fused_attention" if fuse else "")
        _record(f"loop_teacher_forced_fp32_{'graphs' if graphs else 'eager'}_{kernels}_{depth}{gemm}",
                {"worst_rel": worst, "streams": per_stream, "max_rows": max(recorder.rows_per_step),
                 "rows_per_step": recorder.rows_per_step})
        assert worst < 1e-4, worst
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


@pytest.mark.parametrize("fold_norms,extra", [(None, {}), (False, {}),
                                              (None, {"small_gemm": "gemv_all", "gemv_rows": 16, "pdl": "auto"}),
                                              (None, {"fuse_attention": True})],
                         ids=["default", "unfolded", "gemv-pdl", "fused-attention"])
def test_free_running_bf16_against_each_stream_alone(ckpt17: Path, fold_norms: bool | None, extra: dict) -> None:
    """bf16: batched rows round differently from batch 1, so greedy codes may part ways after a near tie; report
    how many frames agree before the first difference, and require every stream to complete with finite audio.
    Each stream alone runs the model as loaded (its codes taken before the runner folds the norms, the default)."""
    from voxgate.engine.qwen3tts.model.generate import Qwen3TTS

    tts = Qwen3TTS.from_pretrained(ckpt17, device="cuda", dtype="bf16", progress=False)
    streams = _streams()
    streams[4].cancel_step = None
    solo = {id(s): solo_codes(tts, s) for s in streams}
    runner = make_runner(tts, num_slots=8, **({} if fold_norms is None else {"fold_norms": fold_norms}), **extra,
                         **REAL)
    recorder = drive(tts, runner, streams, greedy=True, max_rows=8)
    agree, total = [], 0
    for s in streams:
        codes, alone = np.stack(recorder.codes[s.codes_id]), solo[id(s)]
        total += len(alone)
        same = (codes[: len(alone)] == alone[: len(codes)]).all(axis=1)
        agree.append(int(np.argmin(same)) if not same.all() else len(same))
        audio = np.concatenate(s.audio)
        assert len(audio) == len(codes) * 1920 and np.abs(audio).max() > 0
    suffix = "_fused_attention" if extra.get("fuse_attention") else "_gemv_pdl" if extra else ""
    _record("loop_free_running_bf16" + ("_unfolded" if fold_norms is False else "") + suffix,
            {"frames_equal_before_first_difference": agree, "frames": total})


def test_a_codec_on_some_sms_makes_the_audio_of_a_codec_on_all(ckpt17: Path) -> None:
    """engine options codec_sms / codec_sms_rows: the codec's calls (all, or those of at most 4 rows) replay on an
    SM-limited stream (engine/sm_stream.py) from graphs captured there; greedy streams through runners that differ
    only in them get the same codes and the same audio."""
    from voxgate.engine.qwen3tts.model.generate import Qwen3TTS

    tts = Qwen3TTS.from_pretrained(ckpt17, device="cuda", dtype="bf16", progress=False)
    made = []
    for sms, rows in ((0, 0), (16, 0), (16, 4)):
        streams = _streams()
        runner = make_runner(tts, num_slots=8, codec_sms=sms, codec_sms_rows=rows, **REAL)
        chunks = runner.chunks
        limited = [chunks.lane(b)[1] is chunks.limited_graphs for b in chunks.buckets]
        assert limited == [bool(sms) and (not rows or b[0] <= rows) for b in chunks.buckets]
        recorder = drive(tts, runner, streams, greedy=True, max_rows=8)
        made.append([(np.stack(recorder.codes[s.codes_id]), np.concatenate(s.audio)) for s in streams])
    for arm in made[1:]:
        for (codes, audio), (codes_sms, audio_sms) in zip(made[0], arm, strict=True):
            np.testing.assert_array_equal(codes, codes_sms)
            np.testing.assert_array_equal(audio, audio_sms)


def test_the_gpu_timeline_times_a_window_of_real_steps(ckpt17: Path, tmp_path: Path) -> None:
    """engine option gpu_timeline on real captured steps: the window's spans are the step stream's, in launch order
    and apart, each codec call on its own stream, and the summary adds up."""
    from voxgate.engine.gpu_timeline import GpuTimeline
    from voxgate.engine.qwen3tts.model.generate import Qwen3TTS

    tts = Qwen3TTS.from_pretrained(ckpt17, device="cuda", dtype="bf16", progress=False)
    runner = make_runner(tts, num_slots=8, **REAL)
    timeline = GpuTimeline(tmp_path, start=3, count=8)
    runner.watch(timeline)
    streams = _streams()
    streams[4].cancel_step = None
    drive(tts, runner, streams, greedy=True, max_rows=8, on_step=timeline.after_step)
    assert timeline.done
    data = json.loads((tmp_path / "timeline.json").read_text())
    summary, spans = data["summary"], data["spans"]
    steps = [(b, e) for kind, _, b, e in spans if kind == "step"]
    assert summary["steps"] == len(steps) >= 8 and summary["codec_calls"] >= 1
    assert all(b < e for b, e in steps) and all(e <= b2 + 1e-3 for (_, e), (b2, _) in itertools.pairwise(steps))
    idle = summary["step_idle_ms"]
    assert sum(summary["idle_by_host_stage_ms"].values()) == pytest.approx(idle, abs=1e-6)
    assert summary["step_busy_ms"] + idle == pytest.approx(summary["wall_ms"], rel=1e-6)
    _record("loop_gpu_timeline", summary)

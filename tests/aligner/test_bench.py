"""The aligner's GPU timing entry runs on the CPU at tiny size: it writes the synthetic checkpoint it is asked for,
times every batch size and writes its JSON (what is timed is not asserted: wall-clock on shared cores)."""

from __future__ import annotations

import argparse
import json

import pytest
from qwen3tts.shared import require_shared
from voxgate.engine.aligner import bench


@pytest.mark.slow
@pytest.mark.parametrize("encoder,graphs,clips,pack", [("eager", False, 32, True), ("captured", True, 32, True),
                                                       ("captured", True, 2, False)])
def test_bench_writes_a_checkpoint_and_its_json(tmp_path, monkeypatch, capsys, encoder, graphs, clips, pack):
    monkeypatch.setenv("VOXGATE_SHARED", str(require_shared("qwen3-tts", "text-tokenizer").parents[1]))
    out = tmp_path / "bench.json"
    assert bench.main(["--checkpoint", str(tmp_path / "ckpt"), "--write-synthetic", "tiny", "--batches", "1,3",
                       "--seconds", "1.5", "--dtype", "fp32", "--device", "cpu", "--warmup", "0", "--runs", "1",
                       "--encoder", encoder, *(["--decoder-graphs", "--decoder", "packed"] if graphs else []),
                       "--profile", "--graph-clips", str(clips), *([] if pack else ["--no-pack-windows"]),
                       "--json", str(out)]) == 0
    assert (tmp_path / "ckpt" / "model.safetensors").is_file()
    report = json.loads(out.read_text())
    assert report["device"] == "cpu" and report["write_s"] >= 0 and report["model"]["decoder_layers"] == 2
    assert report["encoder"] == encoder and report["decoder_graphs"] == graphs and report["pack_windows"] == pack
    assert ("capture_s" in report) == graphs
    assert all("profile" not in r for r in report["results"])  # kernels are traced on CUDA only
    assert "--profile traces CUDA kernels: skipped" in capsys.readouterr().out
    rows = report["results"]
    assert [r["batch"] for r in rows] == [1, 3]
    for r in rows:
        assert r["audio_s"] == r["batch"] * 1.5 and r["seconds"] == [1.5, 1.5]
        assert r["ms_per_audio_second"] == pytest.approx(r["ms_per_call"] / r["audio_s"], abs=1e-3)
        assert r["peak_memory_mib"] is None and r["units_per_clip"] > 0
        assert r["encoder_captured"] == (encoder == "captured")  # 3 clips of 2 chunks: within the buckets
        assert r["decoder_captured"] == (graphs and r["batch"] <= clips)  # more clips than the graphs: eager
        assert r["max_prompt_tokens"] > 2 + 20  # 1.5 s: 20 audio slots between start and end, then the units


def test_a_calls_kernel_profile_keeps_the_heaviest_kernels_in_order(monkeypatch):
    from voxgate.engine.qwen3tts.bench import step_profile

    kernels = [(0.0, 50.0, "gemm"), (60.0, 10.0, "norm"), (70.0, 32.0, "gemm"), (200.0, 4.0, "copy")]
    calls = []

    def traced(call):
        calls.append(call)
        return step_profile.summarize(kernels)

    monkeypatch.setattr(step_profile, "profile_replay", traced)
    profile = bench.kernel_profile(lambda: None, top=2)
    assert len(calls) == 1
    assert profile == {"launches": 4, "busy_ms": 0.096, "span_ms": 0.204, "gaps_ms": 0.108,
                       "top": [{"name": "gemm", "count": 2, "total_ms": 0.082},
                               {"name": "norm", "count": 1, "total_ms": 0.01}]}
    lines = bench.profile_lines({"batch": 4, "profile": profile})
    assert lines[0] == ("kernels of one call of 4 clips: 4 launches, GPU-busy 0.10 ms in a span of 0.20 ms "
                        "(idle gaps 0.11 ms)")
    assert lines[2].split() == ["0.082", "2", "gemm"] and lines[3].split() == ["0.010", "1", "norm"]


def test_clip_lengths_are_drawn_from_the_range_given():
    assert bench.parse_seconds("3") == (3.0, 3.0) and bench.parse_seconds("1-6") == (1.0, 6.0)
    for bad in ("0", "6-1", "x"):
        with pytest.raises((ValueError, argparse.ArgumentTypeError)):
            bench.parse_seconds(bad)
    clips, texts = bench.make_inputs(40, (1.0, 6.0), seed=3)
    seconds = [len(c) / bench.SAMPLE_RATE for c in clips]
    assert all(1.0 <= s <= 6.0 for s in seconds) and max(seconds) - min(seconds) > 3  # spread, not one length
    words = [len(t.split()) for t in texts]
    assert all(w == max(1, round(2.5 * s)) or abs(w - 2.5 * s) <= 1 for w, s in zip(words, seconds, strict=True))

"""The aligner's GPU timing entry runs on the CPU at tiny size: it writes the synthetic checkpoint it is asked for,
times every batch size and writes its JSON (what is timed is not asserted: wall-clock on shared cores)."""

from __future__ import annotations

import json

import pytest
from qwen3tts.shared import require_shared
from voxgate.engine.aligner import bench


@pytest.mark.slow
@pytest.mark.parametrize("encoder", ["eager", "captured"])
def test_bench_writes_a_checkpoint_and_its_json(tmp_path, monkeypatch, capsys, encoder):
    monkeypatch.setenv("VOXGATE_SHARED", str(require_shared("qwen3-tts", "text-tokenizer").parents[1]))
    out = tmp_path / "bench.json"
    assert bench.main(["--checkpoint", str(tmp_path / "ckpt"), "--write-synthetic", "tiny", "--batches", "1,3",
                       "--seconds", "1.5", "--dtype", "fp32", "--device", "cpu", "--warmup", "0", "--runs", "1",
                       "--encoder", encoder, "--json", str(out)]) == 0
    assert (tmp_path / "ckpt" / "model.safetensors").is_file()
    report = json.loads(out.read_text())
    assert report["device"] == "cpu" and report["write_s"] >= 0 and report["model"]["decoder_layers"] == 2
    assert report["encoder"] == encoder
    rows = report["results"]
    assert [r["batch"] for r in rows] == [1, 3]
    for r in rows:
        assert r["ms_per_audio_second"] == pytest.approx(r["ms_per_call"] / (r["batch"] * 1.5), abs=1e-3)
        assert r["peak_memory_mib"] is None and r["units_per_clip"] > 0
        assert r["encoder_captured"] == (encoder == "captured")  # 3 clips of 2 chunks: within the buckets
        assert r["max_prompt_tokens"] > 2 + 20  # 1.5 s: 20 audio slots between start and end, then the units
    assert "ms/audio s" in capsys.readouterr().out


def test_inputs_are_sentence_like():
    clips, texts = bench.make_inputs(4, 2.0)
    assert [len(c) for c in clips] == [32_000] * 4 and len(set(texts)) == 4
    assert all(len(t.split()) == 5 for t in texts)

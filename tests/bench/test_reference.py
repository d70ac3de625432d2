"""The baseline arm (qwen-tts reference at batch 1) on a tiny synthetic checkpoint on CPU, in a child process
(it stubs audio modules in sys.modules), and the report plumbing of the GPU suite: merge and the 8-file output."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from voxgate.gateway.bench.command import SUITE_PROFILES
from voxgate.gateway.bench.load_client import Trace
from voxgate.gateway.bench.loads import PhaseResult
from voxgate.gateway.bench.main import build_report
from voxgate.gateway.bench.plan_runner import Plan, phase_json
from voxgate.gateway.bench.report import load, merge, write
from voxgate.gateway.bench.stats import to_sample
from voxgate.gateway.bench.suite import PROFILES, collect

CLI = [sys.executable, "-m", "voxgate.gateway.cli"]


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("qwen_tts") is None, reason="qwen-tts (the reference) not installed")
def test_baseline_arm_on_a_tiny_checkpoint(tmp_path: Path) -> None:
    ckpt = tmp_path / "tiny"
    made = subprocess.run(
        [
            *CLI,
            "checkpoint",
            "synth",
            "--like",
            "Qwen3-TTS-12Hz-1.7B-CustomVoice",
            "--out",
            str(ckpt),
            "--tiny",
            "--no-encoder",
        ],
        capture_output=True,
        text=True,
    )
    if made.returncode != 0:
        pytest.skip(f"no synthetic checkpoint here: {made.stderr[-300:]}")
    run = subprocess.run(
        [
            *CLI,
            "bench",
            "baseline",
            "--checkpoint",
            str(ckpt),
            "--device",
            "cpu",
            "--dtype",
            "float32",
            "--runs",
            "2",
            "--warmup",
            "1",
            "--out",
            str(tmp_path / "b"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},  # torch's thread pool collapses on a shared 2-core machine
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    result = json.loads((tmp_path / "b" / "baseline.json").read_text())
    assert result["kind"] == "custom_voice" and result["speaker"] == "ryan"
    assert {"sox", "torchaudio", "librosa"} <= set(result["stubbed_modules"])
    row = result["summary"]["sentences"]
    assert row["runs"] == 2 and row["wall_s"] > 0 and row["audio_s_per_s"] > 0
    # The budget reaches the reference: no utterance runs past it. Random weights sample EOS only now and then, so
    # utterances mostly end at the budget; a seed per utterance makes which ones the same on every run.
    made = [(r["audio_s"] / 0.08, r["frames"]) for r in result["runs"]]
    assert all(m <= budget + 2 for m, budget in made), made
    assert any(abs(m - budget) <= 2 for m, budget in made), made


def tiny_report(name: str, concurrency: int) -> dict:
    trace = Trace(0, 4, 1440, scheduled=10.0, sent=10.0, first_audio=10.05, done=11.0)
    trace.chunks = [(10.05, 0.72), (10.9, 0.72)]  # the second chunk is 0.13 s late
    result = PhaseResult(
        {"shape": "closed", "transport": "ws", "workload": "sentences", "concurrency": concurrency},
        samples=[to_sample(trace, 9.0, warmup=False)],
        window_s=2.0,
        window_audio_s=1.44,
        peak_in_flight=concurrency,
    )
    plan = Plan(concurrencies=[concurrency])
    return build_report(name, plan, {"engine": "fake"}, {"closed_loop": [phase_json(result, {})], "open_loop": []}, {})


@pytest.mark.slow
def test_merge_joins_parts(tmp_path: Path) -> None:
    for i, c in enumerate((1, 8)):
        write(tiny_report(f"part{i}", c), tmp_path / f"part{i}", plots=False)
    files = merge([str(tmp_path / "part0" / "report.json"), str(tmp_path / "part1" / "report.json")], tmp_path / "all")
    merged = load(tmp_path / "all" / "report.json")
    assert [p["params"]["concurrency"] for p in merged["closed_loop"]] == [1, 8]
    assert [p["name"] for p in merged["parts"]] == ["part0", "part1"]
    sample = merged["closed_loop"][0]["samples"][0]
    assert sample["pauses_ms"] == pytest.approx([130.0]) and sample["ttfa_ms"] == pytest.approx(50.0)
    assert not sample["in_slo"]
    assert "Part `part1`" in (tmp_path / "all" / "report.md").read_text()
    assert len([f for f in files if f.suffix == ".png"]) == 4


def test_suite_output_fits_a_device_call(tmp_path: Path) -> None:
    work = tmp_path / "work"
    write(tiny_report("suite", 1), work)
    (work / "server.log").write_text("log\n")
    (work / "suite.log").write_text("log\n")
    files = collect(work, tmp_path / "out", work / "suite.log")
    assert len(files) <= 8 and all(f.parent == tmp_path / "out" and f.is_file() for f in files)
    assert load(tmp_path / "out" / "report.json.gz")["name"] == "suite"
    assert set(SUITE_PROFILES) == set(PROFILES)


def test_cli_module_imports_light() -> None:
    code = (
        "import sys, voxgate.gateway.bench.command; "
        "print(sorted(m for m in ('torch', 'matplotlib', 'numpy', 'qwen_tts') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"

"""`voxgate checkpoint synth` and `voxgate synth` end to end, and lazy torch imports."""

from __future__ import annotations

import subprocess
import sys
import wave
from pathlib import Path

import pytest
from voxgate.gateway.cli.main import main


def test_cli_modules_do_not_import_torch() -> None:
    code = ("import sys, voxgate.engine.qwen3tts.tools.synth_cli, voxgate.engine.qwen3tts.tools.checkpoint_cli; "
            "sys.exit('torch' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


@pytest.mark.slow
def test_checkpoint_synth_then_synth(shared: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "ck"
    rc = main(["checkpoint", "synth", "--like", "Qwen3-TTS-12Hz-1.7B-CustomVoice", "--out", str(out), "--tiny",
               "--seed", "5", "--shared", str(shared.parent)])
    assert rc == 0
    assert (out / "model.safetensors").is_file() and (out / "speech_tokenizer/model.safetensors").is_file()
    assert (out / "vocab.json").is_file() and (out / "generation_config.json").is_file()
    wav_path = tmp_path / "out.wav"
    rc = main(["synth", "Hello from the CLI.", "--model", str(out), "--voice", "ryan", "-o", str(wav_path),
               "--max-frames", "9", "--seed", "1", "--device", "cpu"])
    assert rc == 0
    with wave.open(str(wav_path)) as w:
        assert (w.getframerate(), w.getnchannels(), w.getsampwidth(), w.getnframes()) == (24_000, 1, 2, 9 * 1920)
    err = capsys.readouterr().err
    assert "loading model" in err and "9 frames" in err


@pytest.mark.slow
def test_synth_reports_bad_requests(tiny_ckpt: object, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = tiny_ckpt("cv06")  # type: ignore[operator]
    rc = main(["synth", "x", "--model", str(d), "--voice", "nobody", "-o", str(tmp_path / "x.wav"), "--device", "cpu"])
    assert rc == 2 and "nobody" in capsys.readouterr().err


def test_checkpoint_synth_unknown_like(tmp_path: Path, shared: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["checkpoint", "synth", "--like", "Qwen3-TTS-99B", "--out", str(tmp_path / "x"), "--tiny",
               "--shared", str(shared.parent)])
    assert rc == 2 and "Qwen3-TTS-12Hz-1.7B-Base" in capsys.readouterr().err


@pytest.mark.slow
def test_synth_clones_in_context_from_a_wav(tiny_ckpt: object, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """--ref-audio (16 kHz here: resampled) + --ref-text: ICL; the output holds only the new frames' audio."""
    import numpy as np
    from voxgate.engine.qwen3tts.tools.wav import write_wav

    d = tiny_ckpt("base17")  # type: ignore[operator]
    ref = tmp_path / "ref.wav"
    write_wav(ref, (0.2 * np.sin(np.arange(20_000) * 0.05)).astype(np.float32), sample_rate=16_000)
    out = tmp_path / "out.wav"
    rc = main(["synth", "Hello again.", "--model", str(d), "--ref-audio", str(ref), "--ref-text", "A reference.",
               "-o", str(out), "--max-frames", "5", "--greedy", "--device", "cpu"])
    assert rc == 0
    with wave.open(str(out)) as w:
        assert (w.getframerate(), w.getnframes()) == (24_000, 5 * 1920)
    rc = main(["synth", "x", "--model", str(d), "--ref-text", "A reference.", "-o", str(out), "--device", "cpu"])
    assert rc == 2 and "--ref-text needs --ref-audio" in capsys.readouterr().err

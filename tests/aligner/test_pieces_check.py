"""`python -m voxgate.engine.aligner.pieces_check` (engine/aligner/pieces_check.py) on the tiny aligner: a recording's
words in pieces against whole, each call listed; aligned whole (group 0) the two columns are the same."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from voxgate.engine.aligner.align import Aligner
from voxgate.engine.aligner.pieces_check import in_pieces, main
from voxgate.engine.qwen3tts.tools.wav import to_int16, write_wav
from voxgate.engine.words import text_words

from .checkpoint import write_sharp_aligner
from .clips import clip

TEXT = "So the birch canoe slid on the smooth planks, glued to the sheet."


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_sharp_aligner(tmp_path_factory.mktemp("timed-aligner"), classes=20)


def test_the_check_prints_both_columns_and_every_call(checkpoint: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    wav = tmp_path / "speech.wav"
    write_wav(wav, clip(3.0, 16_000, seed=3), 16_000)  # another rate: resampled to 24 kHz
    assert main(["--checkpoint", str(checkpoint), "--wav", str(wav), "--text", TEXT, "--group-ms", "500"]) == 0
    out = capsys.readouterr().out.splitlines()
    calls = int(out[0].split()[0])
    assert calls >= 2 and out[0].count("ms /") == calls  # pieces, then the rest
    rows = [line.split() for line in out[2:-1]]
    assert [r[0] for r in rows] == [w.text for w in text_words(TEXT)]
    assert out[-1].startswith("largest start difference:") and out[-1].endswith(f"over {len(rows)} words")


async def test_aligned_whole_the_pieces_column_is_the_whole_one(checkpoint: Path) -> None:
    aligner = Aligner.from_pretrained(checkpoint)
    pcm = to_int16(clip(2.0, 24_000, seed=4))
    words, clips = await in_pieces(aligner, pcm, TEXT, group_ms=0, margin_ms=240)
    assert words == aligner.align(pcm.astype(np.float32) / 32768.0, TEXT) and len(clips) == 1


def test_a_file_that_is_no_wav_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "not.wav").write_text("text")
    assert main(["--checkpoint", "unused", "--wav", str(tmp_path / "not.wav"), "--text", "Hi."]) == 2
    assert main(["--checkpoint", "unused", "--wav", str(tmp_path / "missing.wav"), "--text", "Hi."]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all(line.startswith("pieces_check: cannot read ") for line in err), err

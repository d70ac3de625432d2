"""`voxgate bench textrate`: two real gateways (text streaming on and off) on the fake engine, words sent at a set
rate, a report with its plot; and the base config the gateways start from (`--config`, `--engine-option`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from voxgate.gateway.bench.textrate_sweep import _base
from voxgate.gateway.cli.main import main as voxgate_main

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_textrate_on_the_fake_engine_writes_both_modes_and_a_plot(tmp_path: Path) -> None:
    out = tmp_path / "textrate"
    rc = voxgate_main(["bench", "textrate", "--wps", "40", "--sessions", "2", "--texts", "1", "--sentences", "2",
                       "--out", str(out)])
    assert rc == 0
    report = json.loads((out / "report.json").read_text())
    assert set(report["results"]) == {"streaming", "sentence"}
    for points in report["results"].values():
        (point,) = points
        assert point["wps"] == 40 and point["requests"] == 2 and point["errors"] == 0
        assert point["audio_s"] > 1 and point["ttfa_ms"]["p50"] > 0
    assert "| 40 |" in (out / "report.md").read_text()
    assert (out / "ttfa_by_wps.png").read_bytes().startswith(PNG)


def test_the_base_config_carries_its_settings_and_engine_options() -> None:
    ns = argparse.Namespace(config="qwen3tts", engine="qwen3tts", engine_option=["model=/ckpt", "max_rows=64"],
                            device_rtf=20.0, chunk_ms="80")
    lines, options = _base(ns)
    assert 'gc_collect = "idle"' in lines and "loop_chunk_turns = 16" in lines
    # the gateways' own settings and the command line's come from textrate, not from the base
    assert not any(line.split(" = ")[0] in {"engine", "host", "port", "text_streaming"} for line in lines)
    assert options["model"] == "/ckpt" and options["max_rows"] == "64" and options["device"] == "cuda"
    assert "device_rtf" not in options  # the fake engine's options only for the fake engine

    fake, options = _base(argparse.Namespace(config=None, engine="fake", engine_option=[], device_rtf=5.0,
                                             chunk_ms="40"))
    assert fake == [] and options == {"device_rtf": 5.0, "shared_device": "false", "chunk_ms": "40"}

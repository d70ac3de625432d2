"""`voxgate bench codec` (engine/qwen3tts/bench/codec_bench.py): a dry run at tiny shapes on CPU (the GPU run is the
same code with --device cuda), and the fused path's variants."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton")


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    """Tiny shapes gain nothing from intra-op threads (see test_codec_stream.py)."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.mark.slow
def test_dry_run_through_the_cli(tmp_path: Path, shared: Path) -> None:
    from voxgate.gateway.cli.main import main

    args = ["bench", "codec", "--out", str(tmp_path), "--device", "cpu", "--tiny", "--iters", "1", "--frames", "9",
            "--utterances", "1", "--shared", str(shared.parent), "--paths", "reference", "--shapes", "3x1,2x2"]
    assert main(args) == 0
    report = json.loads((tmp_path / "codec_bench.json").read_text())
    assert report["exactness_reference"]["pass"] and report["state_values"] > 0
    assert report["snr_reference"]["median_db"] > 15
    assert len(report["speed"]) == 4 and not any("error" in s for s in report["speed"])
    assert "| reference | bf16 | 3 x 1 |" in (tmp_path / "codec_bench.md").read_text()


def test_variants_set_kernel_options() -> None:
    """Each variant is a change from the measured defaults; "+" combines them; an unknown name is refused."""
    from voxgate.engine.qwen3tts.bench.codec_measure import variant_settings
    from voxgate.kernels.causal_conv import ConvOptions

    assert variant_settings("default") == (ConvOptions(), 4)
    assert variant_settings("pointer") == (ConvOptions(tma=False), 4)
    assert variant_settings("accurate_sin+attn_2warps") == (ConvOptions(fast_sin=False), 2)
    assert variant_settings("tma_min_1024+no_autotune") == (ConvOptions(tma_min_length=1024, autotune=False), 4)
    for bad in ("fastest", "tma_min_", "offset_loads", "split_k", "fuse_units"):
        with pytest.raises(ValueError, match="unknown variant"):
            variant_settings(bad)


@pytest.mark.parametrize(("flag", "value", "message"), [("--variants", "default,split_k", "unknown variant 'split_k'"),
                                                     ("--paths", "fused,cudnn", "unknown codec path 'cudnn'"),
                                                     ("--shapes", "128x1,8", "'8' is not ROWSxFRAMES")])
def test_bad_names_fail_in_one_line_before_any_work(tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str,
                                                     value: str, message: str) -> None:
    from voxgate.gateway.cli.main import main

    assert main(["bench", "codec", "--out", str(tmp_path / "out"), "--device", "cpu", flag, value]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()

"""`voxgate bench steps` end to end on the CPU (a dry run on a tiny checkpoint): every captured bucket timed, and
the report says which engine options it ran with (a step's time depends on them: fold_norms, depth, small_gemm)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.mark.slow
def test_the_step_bench_reports_its_buckets_and_options(tiny_ckpt: Callable[[str], Path], tmp_path: Path) -> None:
    from voxgate.gateway.cli import main

    out = tmp_path / "steps"
    code = main(["bench", "steps", "--checkpoint", str(tiny_ckpt("cv17")), "--out", str(out), "--dtype", "fp32",
                 "--reps", "1", "--engine-option", "row_buckets=1,2", "--engine-option", "prefill_buckets=16",
                 "--engine-option", "fold_norms=false"])
    assert code in (0, None)
    report = (out / "steps.md").read_text()
    assert "Engine options: `row_buckets=1,2`, `prefill_buckets=16`, `fold_norms=false`." in report
    steps = json.loads((out / "steps.json").read_text())["steps"]
    assert {(s["rows"], s["prefill_tokens"]) for s in steps} >= {(1, 0), (2, 0), (1, 16)}
    assert {d["depth"] for d in json.loads((out / "steps.json").read_text())["depth"]} == {
        "fused", "layers", "persistent"}


def test_the_step_bench_takes_known_depth_forms_or_none() -> None:
    import argparse

    from voxgate.engine.qwen3tts.bench.step_bench import _depth_variants

    assert _depth_variants("none") == () and _depth_variants("") == ()
    assert _depth_variants("layers,fused") == ("layers", "fused")
    with pytest.raises(argparse.ArgumentTypeError, match="unknown depth forms"):
        _depth_variants("layers,fast")

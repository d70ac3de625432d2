"""The CI check of `voxgate bench` (issue 6): against the embedded espeak engine, closed loop c=4 and one open-loop
rate, a few seconds each, producing a valid report with plots."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from voxgate.gateway.cli.main import main as voxgate_main

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_bench_run_against_espeak(tmp_path: Path, capsys) -> None:
    out = tmp_path / "report"
    rc = voxgate_main(
        [
            "bench",
            "run",
            "--engine",
            "espeak",
            "--concurrency",
            "4",
            "--closed-warmup",
            "1",
            "--closed-duration",
            "3",
            "--rates",
            "2",
            "--seeds",
            "1",
            "--warmup",
            "1",
            "--duration",
            "3",
            "--drain",
            "20",
            "--warmup-requests",
            "2",
            "--out",
            str(out),
            "--name",
            "ci-espeak",
        ]
    )
    assert rc == 0
    printed = capsys.readouterr().out
    assert "closed loop: best" in printed and "SLO capacity sentences (ws)" in printed

    report = json.loads((out / "report.json").read_text())
    assert report["schema"] == "voxgate.bench/1" and report["name"] == "ci-espeak"
    assert report["command"].startswith("voxgate bench run ") and "--engine espeak" in report["command"]
    assert len(report["commit"]["sha"] or "") == 40
    assert report["server"]["engine"] == "espeak" and report["server"]["cold_start_s"] > 0
    assert report["server"]["session"]["audio"]["sample_rate"] == 24000
    assert report["length_rule"] and report["slo"]["ttfa_ms_max"] == 200

    (closed,) = report["closed_loop"]
    assert closed["params"]["concurrency"] == 4 and closed["peak_in_flight"] == 4
    assert closed["audio_s_per_s"] > 1.0  # espeak is much faster than real time even on 2 CI cores
    summary = closed["summary"]
    assert summary["requests"] > 4 and summary["errors"] == 0
    assert all(math.isfinite(summary["ttfa_ms"][q]) for q in ("p50", "p90", "p99"))
    measured = [s for s in closed["samples"] if not s["warmup"]]
    assert len(measured) == summary["requests"]
    assert all(s["ok"] and s["audio_s"] > 0 and s["audio_s"] * 1000 <= s["max_audio_ms"] + 20 for s in measured)

    (search,) = report["open_loop"]
    (rate,) = search["rates"]
    assert rate["rate"] == 2.0 and len(rate["seeds"]) == 1
    assert 0.0 <= rate["summary"]["in_slo_share"] <= 1.0
    assert search["capacity_rps"] in (None, 2.0)
    assert set(report["server_metrics_absent"]) <= {
        "voxgate_engine_step_seconds",
        "voxgate_engine_gc_pause_seconds",
        "voxgate_engine_queue_wait_seconds",
    }

    assert report["plots"] == [
        "ttfa_by_rate.png",
        "slo_share_by_rate.png",
        "audio_s_per_s_by_concurrency.png",
        "pause_histogram.png",
    ]
    for name in report["plots"]:
        data = (out / name).read_bytes()
        assert data.startswith(PNG) and len(data) > 5000
    md = (out / "report.md").read_text()
    for heading in ("## Closed loop", "## Open loop, sentences (ws)", "## Server side", "## Plots"):
        assert heading in md
    assert (out / "server.log").exists()

"""End to end on CPU against a real gateway process with the fake engine (engine/fake.py), whose audio comes at a
set real-time factor: the pause accounting has a known answer and the capacity search finds a knee."""

from __future__ import annotations

import asyncio

import pytest
from voxgate.gateway.bench.gateway_process import GatewayProcess
from voxgate.gateway.bench.plan_runner import Plan, run_plan


@pytest.mark.perf
def test_pause_accounting_on_a_slower_than_real_time_stream(tmp_path) -> None:
    # 100 ms chunks made at 0.5x real time: each chunk arrives 200 ms after the one before, so after the first
    # every full chunk is a pause of 100 ms. "four words" texts: budget 18 frames = 1440 ms = 14 full chunks + 40 ms,
    # and the short last chunk (made in 80 ms) is on time: 13 pauses of about 100 ms.
    texts = tmp_path / "four.txt"
    texts.write_text("one two three four\n")
    options = {"device_rtf": "0.5", "chunk_ms": "100", "first_chunk_ms": "0"}
    plan = Plan(workloads=[str(texts)], concurrencies=[1], closed_warmup_s=0.0, closed_duration_s=0.5, drain_s=10)
    with GatewayProcess("fake", options, log_path=tmp_path / "server.log") as gw:
        results = asyncio.run(run_plan(gw.base_url, plan, log=lambda _: None))
    (sample,) = [s for s in results["closed_loop"][0]["samples"] if not s["warmup"]]
    assert sample["ok"] and sample["audio_s"] == pytest.approx(1.44)
    # a loaded machine can only make chunks later: pauses grow, and the short last chunk may turn late too
    assert len(sample["pauses_ms"]) in (13, 14), sample["pauses_ms"]
    assert all(85 < p < 250 for p in sample["pauses_ms"][:13]), sample["pauses_ms"]
    assert 1250 < sum(sample["pauses_ms"][:13]) < 2200
    assert sample["total_pause_ms"] == pytest.approx(sum(sample["pauses_ms"]))
    assert not sample["in_slo"]


@pytest.mark.slow
def test_capacity_search_finds_the_knee_of_a_shared_device(tmp_path) -> None:
    # device_rtf=20 serves 20 audio-s/s in all; sentences carry about 3 s each (length rule), so about 6.7 req/s
    # saturates it. 1/s is comfortably in SLO (first audio about 25 ms); 16/s is more than twice the device.
    plan = Plan(
        workloads=["sentences"],
        concurrencies=[],
        rates=[1.0, 16.0],
        seeds=[1],
        warmup_s=1.0,
        duration_s=5.0,
        drain_s=4.0,
    )
    with GatewayProcess("fake", {"device_rtf": "20"}, log_path=tmp_path / "server.log") as gw:
        results = asyncio.run(run_plan(gw.base_url, plan, log=lambda _: None))
    (search,) = results["open_loop"]
    low, high = search["rates"]
    assert low["summary"]["in_slo_share"] >= 0.9
    assert high["summary"]["in_slo_share"] < 0.5
    assert high["peak_in_flight"] > low["peak_in_flight"]
    assert high["summary"]["underruns"] > 0 and high["summary"]["ttfa_ms"]["p90"] > 200
    assert search["capacity_rps"] == 1.0

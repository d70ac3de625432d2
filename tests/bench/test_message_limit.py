"""The bench keeps each session within session.started's `limits.max_messages_per_s` (voxgate.client's
message_pacer.py): against an engine that answers in milliseconds, a closed loop sent hundreds of messages a second
per session, lost every request to `rate_limited` after the first burst and reported 0 audio-s/s with no word of
why."""

from __future__ import annotations

import asyncio
from pathlib import Path

from support import running_gateway
from voxgate.engine.fake import FakeEngine
from voxgate.gateway.bench.main import build_report
from voxgate.gateway.bench.plan_runner import Plan, _trouble, run_plan
from voxgate.gateway.bench.stats import summarize
from voxgate.gateway.config import GatewayConfig, Limits


def test_a_fast_engine_under_a_low_limit_loses_no_request(tmp_path: Path) -> None:
    texts = tmp_path / "two.txt"
    texts.write_text("one two\n")
    # each stream at 1,000x real time: a request's 0.74 s of audio in under a millisecond, so a closed loop would send
    # its three messages a request far faster than 30 a second
    config = GatewayConfig(limits=Limits(max_messages_per_s=30.0))
    plan = Plan(workloads=[str(texts)], concurrencies=[2], closed_warmup_s=0.2, closed_duration_s=1.5, drain_s=10)
    with running_gateway(FakeEngine(device_rtf=1000.0, shared_device=False), config) as server:
        results = asyncio.run(run_plan(server.http_url, plan, log=lambda _: None))
    phase = results["closed_loop"][0]
    summary = phase["summary"]
    assert summary["requests"] > 0 and summary["errors"] == 0, summary
    assert all(s["ok"] and s["error"] is None for s in phase["samples"])
    assert summary["requests_paced"] > 0 and summary["paced_s"] > 0
    # two sessions of 30 messages a second, three a request: at most 20 requests a second, plus a second's burst each
    window = plan.closed_warmup_s + plan.closed_duration_s
    assert len(phase["samples"]) <= 20 * window + 2 * 10 + 2
    report = build_report("paced", plan, {}, results, {}, described={})
    assert any("limits.max_messages_per_s" in note and "closed c=2" in note for note in report["notes"])


def test_a_phase_of_errors_says_which() -> None:
    def sample(error: str | None) -> dict:
        return {"warmup": False, "ttfa_ms": None if error else 5.0, "pauses_ms": [], "ok": error is None,
                "error": error, "in_slo": error is None, "total_pause_ms": 0.0, "audio_s": 0.0 if error else 1.0}

    summary = summarize([sample("rate_limited: over 200 messages a second; dropped")] * 3 + [sample("cancelled")]
                        + [sample(None)])
    assert summary["errors"] == 4 and summary["error_top_count"] == 3
    assert summary["error_top"].startswith("rate_limited")
    line = _trouble(summary)
    assert line == ", 4 errors (most: rate_limited: over 200 messages a second; dropped, 3)", line
    assert _trouble(summarize([sample(None)])) == ""

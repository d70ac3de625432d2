"""`voxgate bench --overload` (issue 26.4): an open-loop phase past capacity against a gateway that refuses what it
cannot queue (`max_queued_streams`, engine_full). Refusals are counted apart from errors and from requests in SLO,
with their answer times; goodput is the requests in SLO per second; the report renders all of it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from voxgate.engine.fake import FakeEngine
from voxgate.gateway.bench.main import build_report
from voxgate.gateway.bench.plan_runner import Plan, run_plan
from voxgate.gateway.bench.report import write


def overload_plan(texts: Path, transport: str, **fields) -> Plan:
    return Plan(workloads=[str(texts)], transport=transport, concurrencies=[], seeds=[1], warmup_s=0.3,
                duration_s=1.5, drain_s=5, voice="tone-a", **fields)


@pytest.fixture
def texts(tmp_path: Path) -> Path:
    path = tmp_path / "texts.txt"
    path.write_text("one two three four\n")
    return path


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["ws", "http"])
def test_overload_counts_refusals_apart_and_reports_goodput(gateway, texts: Path, tmp_path: Path,
                                                            transport: str) -> None:
    # Every stream waits 60 ms for its first audio; with one stream queued the engine is full: at 2 x 15 req/s
    # about one arrival in two finds another waiting and is refused.
    server = gateway(FakeEngine(first_chunk_ms=60, device_rtf=200), max_queued_streams=1)
    plan = overload_plan(texts, transport, overload=2.0, capacity=15.0)
    results = asyncio.run(run_plan(server.http_url, plan, log=lambda _: None))
    (search,) = results["open_loop"]
    assert search["rates"] == [] and search["capacity_rps"] is None  # no search: the capacity was given
    over = search["overload"]
    assert (over["factor"], over["capacity_rps"], over["capacity_from"], over["rate"]) == (2.0, 15.0, "given", 30.0)
    s = over["summary"]
    measured = [x for x in over["seeds"][0]["samples"] if not x["warmup"]]
    refused = [x for x in measured if x["refused"]]
    served = [x for x in measured if x["ok"]]
    assert refused and served and s["errors"] == 0  # a refusal is not an error
    assert len(refused) + len(served) == len(measured) == s["requests"]
    assert s["refused"] == len(refused) and s["refusal_share"] == pytest.approx(len(refused) / len(measured))
    assert all(x["error"] is None and not x["in_slo"] and x["refusal_ms"] >= 0 for x in refused)
    assert s["refusal_ms"]["p50"] is not None and s["refusal_ms"]["p99"] >= s["refusal_ms"]["p50"]
    assert over["goodput_rps"] == pytest.approx(s["in_slo"] / plan.duration_s)
    assert over["seeds"][0]["params"]["overload"] == 2.0

    report = build_report("t", plan, {"engine": "fake"}, results, {})
    write(report, tmp_path / "out", plots=False)
    md = (tmp_path / "out" / "report.md").read_text()
    assert "30 (overload 2x 15)" in md and "goodput /s" in md and "refusal answer p50 / p99 ms" in md
    assert "(overload 2x)" in md  # the phase's label in the server-side tables
    timeline = md[md.index("### First-audio timeline"):]
    rows = [line.split(" | ")[2] for line in timeline.splitlines() if line.startswith("| open ")]
    assert rows == ["admit", "queue", "codec", "write", "**total (sum of means)**"]


def test_overload_without_a_capacity_is_left_out_and_said_so(texts: Path, tmp_path: Path) -> None:
    plan = overload_plan(texts, "http", overload=2.0)  # no rates, no search, no --capacity: nothing to multiply
    results = asyncio.run(run_plan("http://127.0.0.1:9", plan, log=lambda _: None))  # (no request is sent)
    (search,) = results["open_loop"]
    assert search["overload"]["skipped"].startswith("no capacity")
    write(build_report("t", plan, {"engine": "fake"}, results, {}), tmp_path, plots=False)
    assert "Overload phase not run: no capacity" in (tmp_path / "report.md").read_text()


@pytest.mark.parametrize(("close", "code", "error_first"), [(1013, "engine_full", False),
                                                        (4029, "too_many_sessions", False),
                                                        (4029, "too_many_sessions", True)])
async def test_a_session_refused_for_load_before_its_start_is_a_refusal(close: int, code: str,
                                                                       error_first: bool) -> None:
    """A gateway at capacity (1013) or at its session cap (4029) refuses a new session at once, often before the
    client sent session.start, with or without an `error` first: the bench counts either as a refusal (Refused), not
    as a connection error (an H100 run counted 39 such sessions as errors, gather-1207u/call1). Any other close stays
    an error."""
    from voxgate.gateway.bench.load_client import Refused, WsClient
    from websockets.asyncio.server import serve
    from websockets.exceptions import ConnectionClosed

    async def refuse(ws) -> None:  # the handshake is accepted, then the session is refused without reading
        if error_first:
            await ws.send(json.dumps({"type": "error", "code": code, "message": "retry later"}))
        await ws.close(close, code)

    async def violate(ws) -> None:
        await ws.close(4400, "protocol_violation")

    async with serve(refuse, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        with pytest.raises(Refused, match=code if error_first else str(close)):
            await WsClient.connect(f"ws://127.0.0.1:{port}/v1/tts/ws")
    async with serve(violate, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        with pytest.raises(ConnectionClosed) as caught:
            await WsClient.connect(f"ws://127.0.0.1:{port}/v1/tts/ws")
        assert not isinstance(caught.value, Refused)


@pytest.mark.slow
def test_a_refused_closed_loop_client_waits_for_the_retry_hint(gateway, texts: Path) -> None:
    """Closed loop past capacity (six clients, one stream queued at most): a refused client waits for the
    refusal's `retry_after_ms` (at most MAX_RETRY_WAIT_S) before its next request, as a polite client does, instead
    of asking again at once (a storm of refusals that measures the clients)."""
    from voxgate.gateway.bench import loads

    server = gateway(FakeEngine(first_chunk_ms=60, device_rtf=200), max_queued_streams=1)
    plan = Plan(workloads=[str(texts)], transport="ws", concurrencies=[6], rates=[], seeds=[1], closed_warmup_s=0.3,
                closed_duration_s=1.5, drain_s=5, voice="tone-a")
    results = asyncio.run(run_plan(server.http_url, plan, log=lambda _: None))
    (phase,) = results["closed_loop"]
    samples = phase["seeds"][0]["samples"] if "seeds" in phase else phase["samples"]
    refused = [x for x in samples if x["refused"]]
    assert refused and any(x["ok"] for x in samples)
    assert all(x["retry_after_ms"] and x["retry_after_ms"] >= 1 for x in refused)  # every refusal says when
    # each refused client waits its hint (capped) before it asks again: at most one refusal per client per wait
    wait = min(loads.MAX_RETRY_WAIT_S, min(x["retry_after_ms"] for x in refused) / 1e3)
    phase_s = plan.closed_warmup_s + plan.closed_duration_s
    assert len(refused) <= 6 * (phase_s / wait + 1), (len(refused), wait)
    by_start = sorted(x["scheduled_s"] for x in refused)
    assert by_start[-1] <= phase_s + 0.1  # nothing asked after the phase

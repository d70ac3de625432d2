"""`voxgate bench --client-procs N`: an open-loop phase offered by N processes is the single-process schedule, every
arrival sent once (each process every N-th), its samples merged into one phase."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from voxgate.engine.fake import FakeEngine
from voxgate.gateway.bench import client_procs
from voxgate.gateway.bench.arrivals import poisson_arrivals
from voxgate.gateway.bench.plan_runner import Plan, run_plan
from voxgate.gateway.bench.workload import Workload


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["ws", "http"])
def test_two_processes_send_every_arrival_of_the_schedule_once(gateway, tmp_path: Path, transport: str,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(client_procs, "START_DELAY_S", 3.0)  # (8 s on a loaded GPU host; the parent's constant)
    texts = tmp_path / "texts.txt"
    texts.write_text("".join(f"text number {i} here\n" for i in range(7)))
    server = gateway(FakeEngine(first_chunk_ms=5, device_rtf=200))
    plan = Plan(workloads=[str(texts)], transport=transport, concurrencies=[], rates=[12.0], seeds=[3],
                warmup_s=0.5, duration_s=2.0, drain_s=10, voice="tone-a", client_procs=2)
    results = asyncio.run(run_plan(server.http_url, plan, log=lambda _: None))
    (phase,) = results["open_loop"][0]["rates"][0]["seeds"]
    schedule = poisson_arrivals(12.0, 2.5, 3)
    order = Workload.load(str(texts)).order(3)
    samples = phase["samples"]
    assert phase["params"]["client_procs"] == 2
    assert len(samples) == len(schedule)  # every arrival once: none lost between the shards, none twice
    assert [s["scheduled_s"] for s in samples] == pytest.approx(list(schedule), abs=1e-6)
    assert [s["text_index"] for s in samples] == [order[k % len(order)] for k in range(len(schedule))]
    assert all(s["ok"] and s["ttfa_ms"] is not None for s in samples)

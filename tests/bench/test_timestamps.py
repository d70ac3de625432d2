"""`voxgate bench run --timestamps`: sessions ask for word timestamps and each sample counts the words timed."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

import pytest
from support import running_gateway
from voxgate.engine.fake import FakeEngine
from voxgate.gateway.bench.command import add_run_arguments
from voxgate.gateway.bench.main import plan_from_args
from voxgate.gateway.bench.plan_runner import Plan, run_plan


class NoWordTimes(FakeEngine):
    supports_word_times = False


@pytest.mark.parametrize("timestamps", [True, False])
def test_samples_count_the_timed_words(tmp_path: Path, timestamps: bool) -> None:
    texts = tmp_path / "four.txt"
    texts.write_text("one two three four\n")
    plan = Plan(workloads=[str(texts)], concurrencies=[1], closed_warmup_s=0.0, closed_duration_s=0.3, drain_s=10,
                timestamps=timestamps)
    with running_gateway(FakeEngine()) as server:
        results = asyncio.run(run_plan(server.http_url, plan, log=lambda _: None))
    phase = results["closed_loop"][0]
    samples = phase["samples"]
    assert samples and all(s["ok"] for s in samples)
    assert all(s.get("timed_words") == (4 if timestamps else None) for s in samples)
    summary = phase["summary"]
    if not timestamps:
        assert "words_timed" not in summary and all("words_after_audio" not in s for s in samples)
        return
    # the server holds each event until before the frame with its word's first sample: none after its audio,
    # so none heard before its event came (a word heard plays no earlier than its frame arrives)
    assert all(s["words_after_audio"] == 0 and s["words_late"] == 0 and s["word_lead_ms_min"] >= 0 for s in samples)
    assert summary["words_timed"] == 4 * len(samples)
    assert summary["words_after_audio"] == summary["words_late"] == 0
    assert summary["word_lead_ms_min"] >= 0 and summary["word_lead_ms_p50"] >= summary["word_lead_ms_p1"] >= 0


def test_a_server_without_word_times_fails_the_requests(tmp_path: Path) -> None:
    texts = tmp_path / "two.txt"
    texts.write_text("one two\n")
    plan = Plan(workloads=[str(texts)], concurrencies=[1], closed_warmup_s=0.0, closed_duration_s=0.3, drain_s=10,
                timestamps=True)
    with running_gateway(NoWordTimes()) as server, pytest.raises(Exception, match="no word timestamps"):
        asyncio.run(run_plan(server.http_url, plan, log=lambda _: None))


def test_timestamps_need_the_websocket() -> None:
    parser = argparse.ArgumentParser()
    add_run_arguments(parser)
    args = parser.parse_args(["--url", "http://x", "--transport", "http", "--timestamps"])
    with pytest.raises(SystemExit, match="needs --transport ws"):
        plan_from_args(args)


def test_the_gpu_suite_serves_an_aligner_and_asks_for_timestamps() -> None:
    from voxgate.gateway.bench.command import add_arguments
    from voxgate.gateway.bench.suite import make_plan

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    base = ["gpu-suite", "--checkpoint", "/ck", "--out", "/out", "--profile", "quick"]
    args = parser.parse_args([*base, "--aligner", "/al", "--timestamps"])
    assert args.aligner == "/al" and make_plan("quick", args, 0.0)[0].timestamps
    assert not make_plan("quick", parser.parse_args(base), 0.0)[0].timestamps


def test_not_held_asked_of_an_engine_that_times_words_as_it_speaks(tmp_path: Path) -> None:
    """The fake engine times each word as it speaks it, so its session.started says `timestamps_hold: true` even to
    `false` (every event comes before its audio either way): the run measures it, as a run asked for not-held word
    times on espeak does. The bench refused such a server with a traceback."""
    texts = tmp_path / "three.txt"
    texts.write_text("one two three\n")
    plan = Plan(workloads=[str(texts)], concurrencies=[1], closed_warmup_s=0.0, closed_duration_s=0.3, drain_s=10,
                timestamps=True, timestamps_hold=False)
    with running_gateway(FakeEngine()) as server:
        results = asyncio.run(run_plan(server.http_url, plan, log=lambda _: None))
    samples = results["closed_loop"][0]["samples"]
    assert samples and all(s["ok"] and s["timed_words"] == 3 and s["words_after_audio"] == 0 for s in samples)


def test_the_cli_says_a_server_it_cannot_measure_with_in_one_line(tmp_path: Path, capsys) -> None:
    """A server without word times, asked for them, ends `voxgate bench run` with one line and exit 1 (it raised a
    traceback)."""
    from voxgate.gateway.cli.main import main

    with running_gateway(NoWordTimes()) as server:
        rc = main(["bench", "run", "--url", server.http_url, "--concurrency", "1", "--closed-duration", "0.3",
                   "--rates", "", "--timestamps", "--out", str(tmp_path / "out"), "--no-plots"])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 1 and "Traceback" not in err and "no word timestamps" in lines[-1], err
    assert lines[-1].startswith("voxgate bench: ServerError: ")


@pytest.mark.parametrize("asked", [True, False])
def test_a_hold_asked_must_be_answered(asked: bool) -> None:
    """`timestamps_hold: true` answered `false` (a server that would let audio go before its words) is an error: the
    run would measure something else than asked. `false` answered `true` is measured (the fake engine's case)."""
    from voxgate.gateway.bench.load_client import ServerError, WsClient

    from .mock_gateway import MockConfig, MockGateway

    async def connect(url: str) -> None:
        client = await WsClient.connect(url, timestamps=True, timestamps_hold=asked)
        await client.ws.close()

    with MockGateway(MockConfig(answer_hold=not asked)) as gw:
        ws_url = gw.base_url.replace("http://", "ws://") + "/v1/tts/ws"
        if asked:
            with pytest.raises(ServerError, match=r"timestamps_hold true asked, session\.started says false"):
                asyncio.run(connect(ws_url))
        else:
            asyncio.run(connect(ws_url))

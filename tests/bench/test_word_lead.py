"""When word timestamps arrive against the audio (`voxgate bench run --timestamps`): on hand-made traces (chunks as
`(arrival_s, duration_s)`, words as `(event arrival_s, start in audio s, chunks received before the event)`, binary
fractions so every float is exact), then end to end against the stand-in gateway, whose events come before their
audio, or after it with `timestamps_hold: false`."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

import pytest
from voxgate.gateway.bench.command import add_run_arguments
from voxgate.gateway.bench.load_client import Trace
from voxgate.gateway.bench.main import plan_from_args
from voxgate.gateway.bench.plan_runner import Plan, _words, run_plan
from voxgate.gateway.bench.playback import heard_at
from voxgate.gateway.bench.report import markdown
from voxgate.gateway.bench.stats import summarize, to_sample, word_leads

from .mock_gateway import MockConfig, MockGateway


def test_events_before_their_audio_lead_by_the_time_to_their_sound() -> None:
    # three 0.5-s chunks arriving at 1.0, 1.25, 1.5: playback starts at 1.0 and never runs dry, so chunk k plays
    # from 1.0 + 0.5 k (1.0, 1.5, 2.0); the audio positions where the chunks begin are 0, 0.5, 1.0
    chunks = [(1.0, 0.5), (1.25, 0.5), (1.5, 0.5)]
    words = [
        (0.875, 0.0, 0),  # chunk 0, heard at 1.0: lead 0.125
        (1.125, 0.75, 1),  # chunk 1 (0.5..1.0), 0.25 into it: heard at 1.5 + 0.25 = 1.75, lead 0.625
        (1.375, 1.0, 2),  # on the boundary: chunk 2, the one starting there (arrives 1.5): heard at 2.0, lead 0.625
    ]
    assert word_leads(chunks, words) == [(False, 0.125), (False, 0.625), (False, 0.625)]


def test_an_event_after_its_audio_is_late_only_once_the_listener_has_heard_the_word() -> None:
    # chunks of 1 s at 0.0 and 0.125: chunk 1 plays from 1.0 (the deadline; it came early)
    chunks = [(0.0, 1.0), (0.125, 1.0)]
    words = [
        (0.25, 1.5, 2),  # both chunks in before the event: after its audio, yet heard at 1.0 + 0.5: lead 1.25
        (0.5, 0.25, 2),  # chunk 0, heard at 0.25, before the event came at 0.5: lead -0.25, late
    ]
    assert word_leads(chunks, words) == [(True, 1.25), (True, -0.25)]


def test_a_pause_in_playback_moves_when_the_word_is_heard() -> None:
    # chunk 0 (0.5 s at 0.0) plays out at 0.5; chunk 1 comes at 1.0: a 0.5-s pause, and chunk 1 plays from 1.0.
    # A word at 0.75 (0.25 into chunk 1) is heard at 1.25, not at 0.75 as an unbroken timeline would have it
    # (which would make the first word below 0.125 s late instead of 0.375 s early).
    chunks = [(0.0, 0.5), (1.0, 0.5)]
    words = [
        (0.875, 0.75, 1),  # event before chunk 1 arrived: lead 1.25 - 0.875 = 0.375
        (1.125, 0.75, 2),  # event after chunk 1 arrived: after its audio, lead 1.25 - 1.125 = 0.125
    ]
    assert word_leads(chunks, words) == [(False, 0.375), (True, 0.125)]


def test_a_word_past_the_audio_has_no_lead() -> None:
    # 1 s of audio; a word at 1.0 (its end) or later never sounded (a cancelled request): no lead, not after
    chunks = [(0.0, 0.5), (0.25, 0.5)]
    assert word_leads(chunks, [(0.5, 1.0, 2), (0.5, 3.0, 2)]) == [(False, None), (False, None)]
    assert word_leads([], [(0.0, 0.0, 0)]) == [(False, None)]


def test_a_word_on_a_frame_boundary_belongs_to_the_frame_starting_there_despite_float_sums() -> None:
    # 20-ms frames at 24 kHz (480 samples): their offsets are float sums of 0.02, not exactly 0.36 at frame 18
    chunks = [(k * 0.02, 480 / 24_000) for k in range(30)]
    where = heard_at(chunks, [0.36, 0.37])
    assert where[0] is not None and where[0][0] == 18 and where[0][1] == pytest.approx(0.36)
    assert where[1] is not None and where[1][0] == 18 and where[1][1] == pytest.approx(0.37)


def _trace(chunks: list[tuple[float, float]], words: list[tuple[float, float, int]] | None) -> Trace:
    trace = Trace(0, 4, None, scheduled=0.0, sent=0.0, first_audio=chunks[0][0], done=chunks[-1][0], chunks=chunks)
    if words is not None:
        trace.timed_words, trace.word_times = len(words), words
    return trace


def test_samples_and_the_phase_summary_count_words_and_pool_their_leads() -> None:
    early = _trace([(1.0, 0.5), (1.25, 0.5), (1.5, 0.5)], [(0.875, 0.0, 0), (1.125, 0.75, 1), (1.375, 1.0, 2)])
    late = _trace([(0.0, 1.0), (0.125, 1.0)], [(0.25, 1.5, 2), (0.5, 0.25, 2), (0.5, 9.0, 2)])
    a, b = to_sample(early, 0.0, warmup=False), to_sample(late, 0.0, warmup=False)
    assert (a["timed_words"], a["words_after_audio"], a["words_late"], a["word_lead_ms_min"]) == (3, 0, 0, 125.0)
    assert a["word_leads_ms"] == [125, 625, 625]
    # the word at 9.0 s is past the 2 s of audio: timed, but no lead
    assert (b["timed_words"], b["words_after_audio"], b["words_late"], b["word_lead_ms_min"]) == (3, 2, 1, -250.0)
    assert b["word_leads_ms"] == [1250, -250]
    warm = to_sample(late, 0.0, warmup=True)  # left out like every warm-up sample
    s = summarize([a, b, warm])
    # leads pooled: -250, 125, 625, 625, 1250; p50 the middle one; p1 = -250 + 0.04 x (125 + 250) = -235
    assert (s["words_timed"], s["words_after_audio"], s["words_late"]) == (6, 2, 1)
    assert s["word_lead_ms_p50"] == 625 and s["word_lead_ms_p1"] == pytest.approx(-235.0)
    assert s["word_lead_ms_min"] == -250.0
    assert _words(s) == ", words 6 timed, 2 after their audio, 1 late, lead p50 625 ms min -250 ms"


def test_phases_without_timestamps_have_no_word_fields() -> None:
    sample = to_sample(_trace([(0.0, 0.5)], None), 0.0, warmup=False)
    assert not {k for k in sample if "word" in k and k != "words"}
    s = summarize([sample])
    assert not {k for k in s if "word" in k}
    assert _words(s) == ""
    assert "Word timestamps" not in markdown({"closed_loop": [_phase(s)]})


def _phase(summary: dict) -> dict:
    return {"params": {"shape": "closed", "workload": "w", "concurrency": 1}, "summary": summary, "audio_s_per_s": 1.0,
            "peak_in_flight": 1}


def test_the_report_has_a_word_timestamps_table() -> None:
    sample = to_sample(_trace([(1.0, 0.5), (1.25, 0.5)], [(0.875, 0.0, 0), (1.5, 0.25, 2)]), 0.0, warmup=False)
    md = markdown({"closed_loop": [_phase(summarize([sample]))]})
    # leads: 1.0 - 0.875 = 125 ms; 1.25 - 1.5 = -250 ms (heard before its event, which came after its audio)
    assert "## Word timestamps" in md
    assert "| closed w c=1 | 2 | 1 | 1 | -62 / -246 / -250 |" in md  # p50 of (-250, 125) is -62.5


def test_timestamps_hold_is_parsed_and_needs_timestamps() -> None:
    parser = argparse.ArgumentParser()
    add_run_arguments(parser)
    base = ["--url", "http://x", "--timestamps"]
    assert plan_from_args(parser.parse_args(base)).timestamps_hold is None
    assert plan_from_args(parser.parse_args([*base, "--timestamps-hold", "false"])).timestamps_hold is False
    assert plan_from_args(parser.parse_args([*base, "--timestamps-hold", "true"])).timestamps_hold is True
    with pytest.raises(SystemExit, match="needs --timestamps"):
        plan_from_args(parser.parse_args(["--url", "http://x", "--timestamps-hold", "false"]))


@pytest.mark.slow
@pytest.mark.parametrize("hold", [None, False])
def test_against_the_mock_events_before_or_after_their_audio(tmp_path: Path, hold: bool | None) -> None:
    texts = tmp_path / "four.txt"
    texts.write_text("one two three four\n")
    plan = Plan(workloads=[str(texts)], concurrencies=[1], closed_warmup_s=0.0, closed_duration_s=0.5, drain_s=10,
                timestamps=True, timestamps_hold=hold)
    with MockGateway(MockConfig()) as gw:
        results = asyncio.run(run_plan(gw.base_url, plan, log=lambda _: None))
        starts = list(gw.cfg.session_starts)
    assert starts and all(s.get("timestamps_hold", "absent") == ("absent" if hold is None else hold) for s in starts)
    phase = results["closed_loop"][0]
    samples = phase["samples"]
    assert samples and all(s["ok"] and s["timed_words"] == 4 for s in samples)
    if hold is None:  # every event before the frame holding its word: never after, never late
        assert all(s["words_after_audio"] == 0 and s["words_late"] == 0 and s["word_lead_ms_min"] >= 0
                   for s in samples)
    else:  # every event right after that frame
        assert all(s["words_after_audio"] == 4 for s in samples)
    s = phase["summary"]
    assert s["words_timed"] == 4 * len(samples)
    assert s["words_after_audio"] == (0 if hold is None else s["words_timed"])

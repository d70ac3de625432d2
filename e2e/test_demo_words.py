"""The demo's word highlighting (issue 28): the page asks for word timestamps and marks each word of the utterance as
it plays. A real gateway process (espeak), Debian chromium, real-time audio; the truth is the worklet's own events,
each with the render frame and the pts where playback started, stalled, resumed or went idle. And an engine without
word times (a gateway in this process): the box says why and the page stops asking."""

from __future__ import annotations

import bisect
from collections.abc import Iterator

import pytest
from demo_page import open_demo, speak, wait_done

pytestmark = pytest.mark.e2e


def played_pts_at(events: list[dict], frame: float) -> int:
    """The worklet's played position at render `frame`: from a start or resume at (pts, frame) it runs with the
    clock; a stall, idle or cancel holds it."""
    events = sorted(events, key=lambda e: e["frame"])
    i = bisect.bisect_right([e["frame"] for e in events], frame) - 1
    assert i >= 0, "a highlight before playback began"
    e = events[i]
    return e["pts"] + round(frame - e["frame"]) if e["kind"] in ("start", "resume") else e["pts"]


@pytest.mark.slow
def test_the_highlighted_word_follows_playback(page, gateway: str) -> None:
    open_demo(page, gateway, codec="pcm_s16le")
    assert page.is_checked("#words-on")  # on by default
    cid = speak(page, "Greeting", mode="words")
    ctx = wait_done(page, cid)
    page.wait_for_function("window.voxgate.words.over")  # the utterance played out: the mark's last move is made
    st = page.evaluate("""() => ({session: window.voxgate.state.session, events: window.voxgate.state.events,
                                  words: window.voxgate.words.words, log: window.voxgate.words.log})""")
    assert st["session"]["timestamps"] == "word"
    words, log = st["words"], st["log"]
    text = page.evaluate("window.voxgate.samples.Greeting")
    assert " ".join(w["word"] for w in words) == text
    assert words[0]["start"] == ctx["started"]["start_pts"] and abs(words[-1]["end"] - ctx["done"]["end_pts"]) <= 3
    # The mark only moves forward and reaches the last word; the page shows the same.
    indices = [entry["index"] for entry in log]
    assert indices == sorted(set(indices)) and indices[-1] == len(words) - 1, indices
    assert len(indices) >= len(words) // 2, indices  # it follows word by word, not in a jump at the end
    assert page.text_content("#words .now") == words[-1]["word"]
    assert page.locator("#words .said").count() == len(words) - 1
    # Each move puts the mark on the word being played then (within two frames), by the worklet's own clock; never
    # early. Where the page's position stopped at its last report (`held`: all it had buffered played, or not
    # playing then), what the worklet got and played since is unknown to the page until the next report: a move
    # can be late by the clock since that report (a busy main thread delays reports; seen under `pytest -n 3`: a
    # move 45 ms after its word's end, the page's position 89 ms behind the worklet's).
    rate, frame_ms = st["session"]["audio"]["sample_rate"], st["session"]["audio"]["frame_ms"]
    slack = 2 * frame_ms * rate // 1000
    for entry in log:
        word, pts = words[entry["index"]], played_pts_at(st["events"], entry["frame"])
        unknown = entry["frame"] - entry["reportFrame"] if entry["held"] else 0
        assert word["start"] - slack <= pts < word["end"] + slack + unknown, (entry, word, pts)
    assert page.errors == []


def test_a_word_is_marked_once_its_first_sample_has_played(page, gateway: str) -> None:
    """web/words.js on made-up reports: a word that starts where the player stands (before playback begins, or where
    it stalls) is not marked yet; one sample on, it is."""
    open_demo(page, gateway, codec="pcm_s16le")
    marks = page.evaluate("""async () => {
        const { WordHighlighter } = await import("./words.js");
        const h = new WordHighlighter(document.createElement("div"), () => 1000);
        h.reset("c");
        h.started({ context_id: "c", start_pts: 480 }, 24000);
        h.add({ context_id: "c", words: [{ word: "one", start_ms: 0, end_ms: 100 },
                                         { word: "two", start_ms: 100, end_ms: 200 }] });
        h.running = false;  // no animation frames: each tick is this test's
        const at = (state, played_pts) => {
            h.onReport({ state, played_pts, frame: 1000, buffered_samples: 0 });
            h.tick();
            return h.index;
        };
        return [at("idle", 480), at("playing", 481), at("stalled", 480 + 2400), at("playing", 480 + 2401)];
    }""")
    assert marks == [-1, 0, 0, 1]


@pytest.fixture(scope="module")
def no_word_times_gateway() -> Iterator[str]:
    """A gateway in this process around the test-tone engine, told it measures no word times."""
    from support import running_gateway
    from voxgate.engine.fake import FakeEngine

    class NoWordTimes(FakeEngine):
        supports_word_times = False

    with running_gateway(NoWordTimes()) as server:
        yield server.http_url


@pytest.mark.slow
def test_an_engine_without_word_times_unticks_the_box_and_says_why(page, no_word_times_gateway: str) -> None:
    open_demo(page, no_word_times_gateway, codec="pcm_s16le", pacing="asap")
    wait_done(page, speak(page, "Numbers", mode="all"))
    started = page.evaluate("window.voxgate.state.session")
    assert started["timestamps"] == "none" and "does not measure word times" in started["timestamps_unavailable"]
    assert not page.is_checked("#words-on") and page.is_disabled("#words-on")
    assert "does not measure word times" in page.get_attribute("label:has(#words-on)", "title")
    assert "no word highlighting" in page.text_content("#log")
    assert page.inner_html("#words") == ""
    # Unticked, the next session asks for none (so the server has nothing to say about it).
    wait_done(page, speak(page, "Greeting", mode="all"))
    started = page.evaluate("window.voxgate.state.session")
    assert started["timestamps"] == "none" and "timestamps_unavailable" not in started
    assert page.errors == []

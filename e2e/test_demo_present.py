"""The demo shows the present (issue 24): the live panel's figures are the current utterance's ("—" until known),
a note goes when the next utterance succeeds, Speak and Stop are enabled only when they can act, and log times
count from one origin for the page's life. A real gateway process (espeak), Debian chromium."""

from __future__ import annotations

import base64
import re

import pytest
from demo_page import open_demo, speak, wait_played
from pausing_proxy import PausingProxy

pytestmark = pytest.mark.e2e

UNKNOWN = "—"
FIGURES = ["s-first", "s-first-server", "s-buffer", "s-played", "s-stalls", "s-causes", "s-bytes"]
HEADER_BYTES = 24  # web/protocol.js


def figures(page) -> dict[str, str]:
    return {k: page.text_content(f"#{k}") for k in FIGURES}


def wait_played_out(page, context_id: str, timeout_s: float = 60) -> dict:
    """Until the context is done and all its audio has come out of the player: the utterance is over."""
    page.wait_for_function(
        """(id) => { const st = window.voxgate.state, c = st.contexts[id];
             return c && c.done && st.report && st.report.played_pts >= c.done.end_pts; }""",
        arg=context_id,
        timeout=timeout_s * 1000,
    )
    return page.evaluate("(id) => window.voxgate.state.contexts[id]", context_id)


def wait_controls(page, speak_enabled: bool, stop_enabled: bool, timeout_s: float = 10) -> None:
    page.wait_for_function(
        """([speak, stop]) => document.querySelector('#speak').disabled === !speak &&
                              document.querySelector('#stop').disabled === !stop""",
        arg=[speak_enabled, stop_enabled],
        timeout=timeout_s * 1000,
    )


def assert_figures_of(page, ctx: dict) -> None:
    """Every figure is this context's own (compared with what the server said and sent for it)."""
    rate = page.evaluate("window.voxgate.state.session.audio.sample_rate")
    shown = figures(page)
    assert re.fullmatch(r"\d+ ms", shown["s-first"]), shown
    assert shown["s-first-server"] == f"{round(ctx['done']['timing']['first_audio_ms'])} ms", shown
    played = (ctx["done"]["end_pts"] - ctx["started"]["start_pts"]) / rate
    assert shown["s-played"] == f"{played:.1f} s", shown
    assert re.fullmatch(r"\d+ / \d+ ms", shown["s-buffer"]), shown
    assert re.fullmatch(r"\d+ · max \d+ ms", shown["s-stalls"]), shown
    assert shown["s-causes"] != UNKNOWN, shown
    frames = [f for f in page.evaluate("window.voxgate.record()")["frames"] if f["ctx"] == ctx["started"]["ctx"]]
    received = sum(HEADER_BYTES + len(base64.b64decode(f["payload"])) for f in frames)
    assert shown["s-bytes"] == f"{received / 1024:.0f} KiB", (shown, received)
    assert page.get_attribute("#s-bytes", "title") == f"{len(frames)} frames"


def test_figures_are_the_current_utterances(page, gateway: str) -> None:
    port = int(gateway.rsplit(":", 1)[1])
    with PausingProxy(port) as proxy:
        open_demo(page, gateway, codec="pcm_s16le", ws=f"ws://127.0.0.1:{proxy.port}/v1/tts/ws")
        assert set(figures(page).values()) == {UNKNOWN}  # nothing spoken yet
        first = speak(page, "Greeting", mode="all")
        assert_figures_of(page, wait_played_out(page, first))

        # The second utterance's messages are held back: until they come, nothing of it is known.
        proxy.hold()
        page.click("#samples >> text=Numbers")
        page.click("#speak")
        page.wait_for_function("(id) => window.voxgate.state.current !== id", arg=first)
        second = page.evaluate("window.voxgate.state.current")
        assert figures(page) == dict.fromkeys(FIGURES, UNKNOWN)
        assert not page.evaluate("(id) => window.voxgate.state.contexts[id].started", second)
        proxy.release()
        ctx = wait_played_out(page, second)
        assert_figures_of(page, ctx)
    assert page.errors == []


def test_an_error_note_goes_when_the_next_utterance_succeeds(page, gateway: str) -> None:
    open_demo(page, gateway, codec="pcm_s16le")
    default = page.input_value("#voice")
    assert page.text_content("#note") == ""
    # A voice the list offered that the server no longer has (say, deleted since the page loaded).
    page.evaluate("""() => { const sel = document.querySelector('#voice');
                             sel.append(new Option('gone', 'no-such-voice')); sel.value = 'no-such-voice'; }""")
    refused = speak(page, "Greeting", mode="all")
    page.wait_for_function("document.querySelector('#note').textContent.startsWith('voice_not_found: ')")
    wait_played_out(page, refused)  # (the server speaks it with its default voice)
    assert page.text_content("#note").startswith("voice_not_found: ")  # still this utterance's

    page.select_option("#voice", default)
    ok = speak(page, "Greeting", mode="all")
    wait_played_out(page, ok)
    assert page.text_content("#note") == ""
    assert page.evaluate("(id) => window.voxgate.state.errors.filter((e) => e.context_id === id)", ok) == []


def test_speak_and_stop_are_enabled_only_when_they_can_act(page, gateway: str) -> None:
    open_demo(page, gateway, codec="pcm_s16le", pacing="asap")
    wait_controls(page, speak_enabled=True, stop_enabled=False)
    page.fill("#text", "  ")
    wait_controls(page, speak_enabled=False, stop_enabled=False)  # nothing to say

    # Stop stops: disabled again at once, and Speak can act again.
    passage = speak(page, "Passage", mode="all")
    wait_controls(page, speak_enabled=False, stop_enabled=True)
    wait_played(page, passage, 1)
    page.click("#stop")
    assert page.evaluate("[document.querySelector('#speak').disabled, document.querySelector('#stop').disabled]") == [
        False,
        True,
    ]
    page.wait_for_function("window.voxgate.state.cancels.length === 1")  # the player has dropped it
    wait_controls(page, speak_enabled=True, stop_enabled=False)

    # Over asap pacing the server is done long before the player: Stop stays while the audio plays, then goes.
    second = speak(page, "Passage", mode="all")
    page.wait_for_function("(id) => window.voxgate.state.contexts[id].done", arg=second, timeout=30_000)
    played = page.evaluate(
        """(id) => { const st = window.voxgate.state;
             return (st.report.played_pts - st.contexts[id].started.start_pts) / st.session.audio.sample_rate; }""",
        second,
    )
    audio_s = page.evaluate("(id) => window.voxgate.state.contexts[id].done.usage.audio_ms / 1000", second)
    assert played < audio_s - 5  # (a ~20 s passage: most of it is still to play)
    wait_controls(page, speak_enabled=False, stop_enabled=True)
    wait_played_out(page, second)
    wait_controls(page, speak_enabled=True, stop_enabled=False)
    assert page.errors == []


def test_log_times_count_from_one_origin_across_sessions(page, gateway: str) -> None:
    open_demo(page, gateway, codec="pcm_s16le")
    for codec in ("pcm_s16le", "mulaw"):  # another codec: another session
        page.select_option("#codec", codec)
        wait_played_out(page, speak(page, "Greeting", mode="all"))
    lines = page.eval_on_selector_all("#log li", "items => items.map((li) => li.textContent)")[::-1]  # oldest first
    assert len([line for line in lines if " session " in line]) == 2, lines
    times = [float(re.match(r"(\d+\.\d\d)s  ", line).group(1)) for line in lines]
    assert times == sorted(times), lines
    assert page.errors == []


def test_a_connection_lost_mid_utterance_ends_it_with_a_note(page, gateway: str) -> None:
    port = int(gateway.rsplit(":", 1)[1])
    with PausingProxy(port) as proxy:
        open_demo(page, gateway, codec="pcm_s16le", ws=f"ws://127.0.0.1:{proxy.port}/v1/tts/ws")
        cid = speak(page, "Passage", mode="all")
        wait_played(page, cid, 1)
        wait_controls(page, speak_enabled=False, stop_enabled=True)
    # The proxy is gone, and the connection with it (no close frame: 1006).
    page.wait_for_function("document.querySelector('#note').textContent.startsWith('connection closed')")
    wait_controls(page, speak_enabled=True, stop_enabled=False)
    assert page.text_content("#conn").startswith("closed")

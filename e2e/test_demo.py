"""The demo page end to end: a real gateway process (espeak), Debian chromium, real-time audio, the tap.

Each test drives the page as a person would (sample text, controls, Speak, Stop) and then compares what the
worklet output (its tap) with what the server sent (the worker's record of every frame).
"""

from __future__ import annotations

import base64
import time

import numpy as np
import pytest
from demo_checks import assert_no_violation, assert_played, browser_lags, opus_reference, pcm_sent, server_stalls
from demo_page import frames_of, open_demo, record, screenshot, speak, tap, wait_buffered, wait_done, wait_played
from pausing_proxy import PausingProxy

pytestmark = pytest.mark.e2e


@pytest.mark.slow
def test_passage_over_pcm_plays_exactly_what_the_server_sent(page, gateway: str) -> None:
    open_demo(page, gateway, codec="pcm_s16le")
    cid = speak(page, "Passage", mode="words")
    wait_played(page, cid, 6)
    shot = screenshot(page, "demo-pcm.png")
    assert shot.stat().st_size > 10_000
    ctx = wait_done(page, cid)
    assert_no_violation(page, ctx)
    audio_s = ctx["done"]["usage"]["audio_ms"] / 1000
    assert 15 <= audio_s <= 30, audio_s
    samples, events = tap(page)
    sent = pcm_sent(frames_of(record(page), ctx["started"]["ctx"]))
    assert len(sent) == ctx["done"]["end_pts"] - ctx["started"]["start_pts"]
    assert_played(samples, events, ctx["started"]["start_pts"], sent)  # sample for sample
    assert page.errors == []


@pytest.mark.slow
def test_passage_over_opus_matches_libopus(page, gateway: str) -> None:
    open_demo(page, gateway, codec="opus")
    cid = speak(page, "Passage", mode="words")
    ctx = wait_done(page, cid)
    assert_no_violation(page, ctx)
    st = page.evaluate("({session: window.voxgate.state.session, stats: window.voxgate.state.stats})")
    assert st["session"]["audio"]["codec"] == "opus" and st["session"]["audio"]["sample_rate"] == 48_000
    samples, events = tap(page)
    frames = frames_of(record(page), ctx["started"]["ctx"])
    assert frames[0]["flags"] & 9 == 9  # FIRST | CODEC_RESET
    ref = opus_reference(frames, st["session"]["audio"]["frame_ms"])
    assert len(ref) == ctx["done"]["end_pts"] - ctx["started"]["start_pts"]
    # Chromium's libopus and the system's may differ in float rounding; the audio itself must be the same.
    assert_played(samples, events, ctx["started"]["start_pts"], ref, atol=1e-4)
    assert np.sqrt(np.mean(ref**2)) > 0.01  # it is speech, not silence compared with silence
    assert page.errors == []


@pytest.mark.slow
def test_mulaw_plays_the_servers_own_decode(page, gateway: str) -> None:
    from voxgate.gateway.audio.frames import mulaw_decode

    open_demo(page, gateway, codec="mulaw")
    cid = speak(page, "Greeting", mode="all")
    ctx = wait_done(page, cid)
    assert_no_violation(page, ctx)
    assert page.evaluate("window.voxgate.state.session.audio.sample_rate") == 8000
    samples, events = tap(page)
    frames = frames_of(record(page), ctx["started"]["ctx"])
    ref = mulaw_decode(b"".join(base64.b64decode(f["payload"]) for f in frames)).astype(np.float32) / 32768
    assert_played(samples, events, ctx["started"]["start_pts"], ref)
    assert page.errors == []


@pytest.mark.slow
def test_barge_in_is_silent_within_20ms_and_the_next_context_plays(page, gateway: str) -> None:
    open_demo(page, gateway, codec="pcm_s16le")
    first = speak(page, "Passage", mode="all")
    wait_played(page, first, 1.5)
    page.click("#stop")
    page.wait_for_function(
        "(id) => window.voxgate.state.contexts[id].cancelled && window.voxgate.state.cancels.length === 1",
        arg=first,
        timeout=5000,
    )
    st = page.evaluate("window.voxgate.state")
    rate = st["session"]["audio"]["sample_rate"]
    samples, events = tap(page)
    (cancel,) = [e for e in events if e["kind"] == "cancel"]
    # The click's render-clock position, in tap indices (tap index and render frame advance together).
    stop_index = cancel["tap_index"] - (cancel["frame"] - st["stopFrame"])
    silent_from = cancel["tap_index"] + 5 * rate // 1000  # after the 5 ms fade
    assert (silent_from - stop_index) * 1000 / rate <= 20
    assert not samples[silent_from:].any()
    acked = st["contexts"][first]["cancelled"]
    assert acked["context_id"] == first
    # No frame of the cancelled context after its ack.
    rec = record(page)
    assert rec["stats"]["frames_after_ack"] == 0
    (msg,) = [m for m in rec["messages"] if m["msg"]["type"] == "context.cancelled"]
    assert not [f for f in rec["frames"][msg["seq"] :] if f["ctx"] == acked["ctx"]]

    second = speak(page, "Greeting", mode="all")
    ctx = wait_done(page, second)
    assert_no_violation(page, ctx)
    samples, events = tap(page)
    sent = pcm_sent(frames_of(record(page), ctx["started"]["ctx"]))
    assert_played(samples, events, ctx["started"]["start_pts"], sent)
    assert page.errors == []


@pytest.mark.slow
def test_a_delivery_pause_shorter_than_the_buffer_is_absorbed(page, gateway: str) -> None:
    """Target 150 ms: a 100 ms hole in delivery is absorbed (no stall over 10 ms the server caused)."""
    port = int(gateway.rsplit(":", 1)[1])
    with PausingProxy(port) as proxy:
        open_demo(page, gateway, codec="pcm_s16le", target=150, ws=f"ws://127.0.0.1:{proxy.port}/v1/tts/ws")
        cid = speak(page, "Greeting", mode="all")
        wait_played(page, cid, 2)
        # the hole starts with more buffered than it lasts (the buffer dips below its target between frames: a
        # hole cut at such a dip ran it dry, a 48-ms stall in a quiet CI run)
        wait_buffered(page, 130)
        proxy.pause(100)
        ctx = wait_done(page, cid)
    assert_no_violation(page, ctx)
    assert page.errors == []


@pytest.mark.slow
def test_a_delivery_hole_past_the_buffer_is_one_network_stall(page, gateway: str) -> None:
    """Delivery held until the player runs dry, then 200 ms more: exactly one stall, which the page reports and the
    server attributes to the network (a `stall` message and the context's `context.done.stalls`).

    The hole is cut by the player's own state, not by a fixed wall-clock length: on loaded cores the audio clock
    can run slower than the wall clock, and a fixed 300 ms hole was then absorbed by a 150 ms buffer."""
    port = int(gateway.rsplit(":", 1)[1])
    with PausingProxy(port) as proxy:
        open_demo(page, gateway, codec="pcm_s16le", target=150, ws=f"ws://127.0.0.1:{proxy.port}/v1/tts/ws")
        cid = speak(page, "Greeting", mode="all")
        wait_played(page, cid, 2)
        # the hole starts with a buffer to drain (100 of the 150 ms): held from an already dry player, the stall
        # would also hold the refill after the release, longer than the hole as measured here (a quiet CI run)
        wait_buffered(page, 100)
        held_from_pts = page.evaluate("window.voxgate.state.report.played_pts")
        held = time.monotonic()
        proxy.hold()
        try:
            page.wait_for_function("window.voxgate.state.report.state === 'stalled'", timeout=10_000)
            time.sleep(0.2)
        finally:
            proxy.release()
        held_ms = (time.monotonic() - held) * 1000
        page.wait_for_function(
            "(pts) => window.voxgate.state.serverStalls.some((s) => s.pts >= pts)", arg=held_from_pts, timeout=10_000
        )
        screenshot(page, "pause-hole.png")
        ctx = wait_done(page, cid)
        st = page.evaluate("window.voxgate.state")
    u = st["report"]["underruns"]
    # The planned stall is the longest one that began after the hold did (by pts: no clock to compare). Any other
    # is the machine's (see load_caused), counted but not judged.
    lags, seen = browser_lags(page), server_stalls(page)
    stall = max((s for s in seen if s["pts"] >= held_from_pts), key=lambda s: s["duration_ms"])
    excused = sum(s["events"] for s in seen) - 1  # a report can carry a load stall and the hole together
    assert u["events"] == 1 + excused, (u, lags)
    if stall["events"] == 1:
        # At least part of the 200 ms after the player ran dry (the audio clock may run slow), at most the hole.
        assert 30 <= stall["duration_ms"] <= held_ms, (stall, held_ms)
    assert stall["context_id"] == cid
    assert excused or abs(stall["duration_ms"] - u["max_gap_ms"]) <= 1
    # Delivery was held after the server sent in time: the network's fault, not the generator's or client's.
    assert stall["cause"] in ("network", "pacing"), stall
    assert ctx["done"]["stalls"]["events"] == 1 + excused
    assert ctx["done"]["stalls"]["by_cause"][stall["cause"]] >= 1
    assert page.errors == []

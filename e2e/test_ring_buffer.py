"""The jitter buffer's policy (web/ring-buffer.js) as a pure module, run in the browser's JS engine: no Web Audio,
no server, no clock (time is the number of samples read)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.e2e

# Helpers available to every snippet: jb(opts) builds a 3 kHz buffer (3 samples = 1 ms) that logs its events,
# write(b, pts, n, last) writes a ramp whose values are the pts, read(b, n) returns the samples read as an array.
PRELUDE = """
const { JitterBuffer } = await import("/ring-buffer.js");
const events = [];
const jb = (opts = {}) => new JitterBuffer({ sampleRate: 3000, targetMs: 0, fadeMs: 0.34, prerollTimeoutMs: 1000,
                                             ...opts }, (kind, pts, offset) => events.push([kind, pts, offset]));
const write = (b, pts, n, last = false) => b.write(Float32Array.from({ length: n }, (_, i) => pts + i), pts, last);
const read = (b, n) => { const out = new Float32Array(n); b.read(out); return Array.from(out); };
"""


@pytest.fixture
def js(page, static_server: str):
    page.goto(f"{static_server}/e2e/worklet-harness.html")

    def run(body: str) -> object:
        return page.evaluate(f"async () => {{ {PRELUDE}\n{body} }}")

    return run


def test_invalid_options_are_refused(js) -> None:
    assert js("try { jb({ sampleRate: 0 }); } catch (e) { return e.message; }") == "invalid sample rate"
    assert js("try { jb({ targetMs: -1 }); } catch (e) { return e.message; }") == "invalid target"


def test_grows_past_its_first_capacity_and_reads_back_exactly(js) -> None:
    # The ring starts at 2 s; 10 s written at once (an asap sender) must come back whole and in order.
    res = js("""
        const b = jb(); write(b, 0, 30000, true);
        const out = read(b, 30000);
        return { ok: out.every((v, i) => v === i), buffered: b.buffered, state: b.state, played: b.playedPts };
    """)
    assert res == {"ok": True, "buffered": 0, "state": "playing", "played": 30000}


def test_past_the_cap_the_oldest_audio_is_dropped_and_counted(js) -> None:
    res = js("""
        const b = jb({ maxSeconds: 1 });  // capacity: 4096 samples (3000 rounded up to a power of two)
        write(b, 0, 3000); write(b, 3000, 3000);
        return { over: b.overflowSamples, buffered: b.buffered, first: read(b, 1)[0] };
    """)
    assert res == {"over": 6000 - 4096, "buffered": 4096, "first": 6000 - 4096}


def test_overlap_is_dropped_and_a_hole_is_jumped(js) -> None:
    res = js("""
        const b = jb();
        write(b, 0, 10); write(b, 5, 10);        // 5..9 again: only 10..14 is new
        write(b, 100, 5, true);                   // a hole 15..99 (DISCONT): jumped, not filled
        const out = read(b, 20);
        return { out, played: b.playedPts };
    """)
    assert res["out"] == [*range(15), *range(100, 105)]
    assert res["played"] == 105


def test_preroll_waits_for_the_target_then_times_out(js) -> None:
    res = js("""
        const b = jb({ targetMs: 50, prerollTimeoutMs: 30 });  // 150 and 90 samples
        write(b, 0, 10);
        const waiting = read(b, 20).every((v) => v === 0) && read(b, 80).every((v) => v === 0) && b.state === "idle";
        read(b, 20);                           // 100 samples of waiting with audio queued: past the timeout
        return { waiting, state: b.state, played: b.playedPts, events };
    """)
    assert res["waiting"] and res["state"] == "stalled" and res["played"] == 10
    assert [e[0] for e in res["events"]] == ["start", "stall"]


def test_a_stall_in_progress_is_reported_and_counted_when_it_ends(js) -> None:
    res = js("""
        const b = jb();
        write(b, 0, 10); read(b, 10);         // plays all of it; no end: the next read stalls
        read(b, 30);                           // 10 ms of silence so far
        const during = b.underrunReport;
        write(b, 10, 10, true); read(b, 10);
        return { during, after: b.underrunReport, events };
    """)
    assert res["during"] == {"events": 0, "samples": 0, "max_gap_ms": 10}
    assert res["after"] == {"events": 1, "samples": 30, "max_gap_ms": 10, "last_pts": 10}  # it began at pts 10
    assert [e[0] for e in res["events"]] == ["start", "stall", "resume"]


def test_an_end_written_after_running_dry_ends_the_stall_uncounted(js) -> None:
    # The server learned of the end after the audio went out: its LAST frame is empty (docs/protocol.md).
    res = js("""
        const b = jb();
        write(b, 0, 10); read(b, 10); read(b, 30);   // ran dry: stalled, 10 ms so far
        write(b, 10, 0, true); read(b, 30);          // the empty LAST frame at the end
        const state = b.state;
        write(b, 10, 10, true); read(b, 10);         // the next context plays; no stall was counted
        return { state, report: b.underrunReport, events: events.map((e) => e[0]) };
    """)
    assert res["state"] == "idle" and res["report"] == {"events": 0, "samples": 0, "max_gap_ms": 0}, res
    assert res["events"] == ["start", "stall", "idle", "start"], res


def test_target_changes_apply_to_the_next_preroll(js) -> None:
    res = js("""
        const b = jb({ targetMs: 20 });
        b.setTarget(40);                       // 120 samples
        write(b, 0, 100); read(b, 5);
        const before = b.state;
        write(b, 100, 30); read(b, 5);
        return { before, after: b.state };
    """)
    assert res == {"before": "idle", "after": "playing"}

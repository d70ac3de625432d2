"""The player worklet and its jitter buffer in an OfflineAudioContext: deterministic, no server, no clock."""

from __future__ import annotations

import base64

import numpy as np
import pytest

pytestmark = pytest.mark.e2e

RATE = 24_000
FRAME = 480  # 20 ms
FADE = 120  # 5 ms at 24 kHz: the worklet's default fade
QUANTUM = 128


def signal(pts: int, n: int) -> np.ndarray:
    """The harness's test signal: a sawtooth on pts (float32, exactly as the page computes it)."""
    p = np.arange(pts, pts + n, dtype=np.int64)
    return (((p % 1000) - 500) / 1000).astype(np.float32)


def at(frame: float) -> int:
    """A moment rounded up to a render quantum (OfflineAudioContext suspends on quantum boundaries)."""
    return int(-(-int(frame) // QUANTUM) * QUANTUM)


def run(page, static_server: str, schedule: list[dict], seconds: float = 1.5, **config: object) -> dict:
    page.goto(f"{static_server}/e2e/worklet-harness.html")
    page.wait_for_function("window.harnessReady === true")
    cfg = {"targetMs": 60, "intervalMs": 50, "tapSeconds": seconds + 1, **config}
    res = page.evaluate(
        "(a) => window.harness.run(a)", {"sampleRate": RATE, "seconds": seconds, "config": cfg, "schedule": schedule}
    )
    assert page.errors == []
    out = np.frombuffer(base64.b64decode(res["out"]), dtype=np.float32)
    msgs = res["messages"]
    events = [m for m in msgs if m["type"] == "event"]
    reports = [m for m in msgs if m["type"] == "report"]
    return {"out": out, "events": events, "reports": reports, "messages": msgs}


def steady(num_frames: int, late: dict[int, int] | None = None) -> list[dict]:
    """One 20 ms frame per 20 ms of audio time; frames in `late` arrive that many samples late (and, as on one
    TCP stream, hold back every frame behind them)."""
    late = late or {}
    schedule: dict[int, list[dict]] = {}
    hold = 0
    for k in range(num_frames):
        t = max(at(k * FRAME + late.get(k, 0)), hold)
        hold = t
        msg = {"type": "audio", "pts": k * FRAME, "n": FRAME, "last": k == num_frames - 1}
        schedule.setdefault(t, []).append(msg)
    return [{"at": t, "msgs": m} for t, m in sorted(schedule.items())]


def kinds(events: list[dict]) -> list[str]:
    return [e["kind"] for e in events]


def test_steady_feed_plays_every_sample_after_preroll(page, static_server: str) -> None:
    r = run(page, static_server, steady(50))
    assert kinds(r["events"]) == ["start", "idle"]
    start = r["events"][0]["tap_index"]
    # Preroll: the 60 ms target (1440 samples) arrives with frame 2, written at the quantum at or after 960.
    assert start == at(2 * FRAME)
    n = 50 * FRAME
    np.testing.assert_array_equal(r["out"][start : start + n], signal(0, n))
    assert not r["out"][:start].any() and not r["out"][start + n :].any()
    last = r["reports"][-1]
    assert last["underruns"] == {"events": 0, "samples": 0, "max_gap_ms": 0}
    assert last["played_pts"] == n and last["buffered_samples"] == 0 and last["state"] == "idle"
    # Reports every 50 ms of audio time (1200 samples).
    frames = [m["frame"] for m in r["reports"]]
    assert np.all(np.diff(frames) >= 1200 - QUANTUM) and np.all(np.diff(frames) <= 1200 + QUANTUM)


def test_late_frame_is_one_stall_with_fades_and_no_lost_audio(page, static_server: str) -> None:
    r = run(page, static_server, steady(50, late={20: 2400}))  # frame 20 arrives 100 ms late
    assert kinds(r["events"]) == ["start", "stall", "resume", "idle"]
    start, stall, resume = (e["tap_index"] for e in r["events"][:3])
    out = r["out"]
    before = stall - start
    # Up to the stall: exact, except the fade-out over the last 5 ms before the gap.
    np.testing.assert_array_equal(out[start : stall - FADE], signal(0, before - FADE))
    tail = out[stall - FADE : stall]
    assert np.all(np.abs(tail) <= np.abs(signal(before - FADE, FADE)) + 1e-7) and abs(tail[-1]) < 1e-6
    # The gap: silence, as long as the stall the worklet reports; the frame arrived at 20 * 480 + 2400.
    gap = resume - stall
    assert stall == 20 * FRAME + start  # the cushion ran out exactly where frame 20 was due
    assert at(20 * FRAME + 2400) == resume and not out[stall:resume].any()
    # After the gap the audio continues where it stopped (nothing dropped), fading in over 5 ms.
    np.testing.assert_array_equal(out[resume + FADE : resume + 20 * FRAME], signal(before + FADE, 20 * FRAME - FADE))
    assert np.all(np.abs(out[resume : resume + FADE]) <= np.abs(signal(before, FADE)) + 1e-7)
    u = r["reports"][-1]["underruns"]
    assert u["events"] == 1 and u["samples"] == gap
    assert u["max_gap_ms"] == pytest.approx(gap * 1000 / RATE)


def test_burst_plays_at_once_and_exactly(page, static_server: str) -> None:
    frames = [{"type": "audio", "pts": k * FRAME, "n": FRAME, "last": k == 49} for k in range(50)]
    r = run(page, static_server, [{"at": 0, "msgs": frames}])
    assert kinds(r["events"]) == ["start", "idle"]
    assert r["events"][0]["tap_index"] == 0
    n = 50 * FRAME
    np.testing.assert_array_equal(r["out"][:n], signal(0, n))
    assert not r["out"][n:].any()
    assert r["reports"][-1]["underruns"]["events"] == 0


def test_short_context_plays_without_reaching_the_target(page, static_server: str) -> None:
    frames = [{"type": "audio", "pts": k * FRAME, "n": FRAME, "last": k == 2} for k in range(3)]  # 60 ms
    r = run(page, static_server, [{"at": 0, "msgs": frames}], seconds=0.5, targetMs=150)
    assert kinds(r["events"]) == ["start", "idle"]
    np.testing.assert_array_equal(r["out"][: 3 * FRAME], signal(0, 3 * FRAME))
    assert r["reports"][-1]["underruns"]["events"] == 0


def test_flush_point_is_not_a_stall(page, static_server: str) -> None:
    first = [{"type": "audio", "pts": k * FRAME, "n": FRAME} for k in range(5)]
    later = [{"type": "audio", "pts": (5 + k) * FRAME, "n": FRAME, "last": k == 4} for k in range(5)]
    schedule = [
        {"at": 0, "msgs": [*first, {"type": "end", "pts": 5 * FRAME}]},
        {"at": at(RATE // 2), "msgs": later},
    ]
    r = run(page, static_server, schedule, seconds=1.0)
    assert kinds(r["events"]) == ["start", "idle", "start", "idle"]
    assert r["reports"][-1]["underruns"]["events"] == 0


def test_cancel_fades_out_then_a_new_context_plays_after_the_hole(page, static_server: str) -> None:
    frames = [{"type": "audio", "pts": k * FRAME, "n": FRAME, "last": k == 49} for k in range(50)]
    cancel_at = at(RATE // 2)
    new = [{"type": "audio", "pts": 30_000 + k * FRAME, "n": FRAME, "last": k == 9} for k in range(10)]
    schedule = [
        {"at": 0, "msgs": frames},
        {"at": cancel_at, "msgs": [{"type": "cancel"}]},
        {"at": at(RATE * 0.6), "msgs": [{"type": "skip", "pts": 30_000}]},  # the server's cancel_pts
        {"at": at(RATE * 0.7), "msgs": new},
    ]
    r = run(page, static_server, schedule)
    assert kinds(r["events"]) == ["start", "cancel", "start", "idle"]
    out = r["out"]
    np.testing.assert_array_equal(out[:cancel_at], signal(0, cancel_at))
    assert np.all(np.abs(out[cancel_at : cancel_at + FADE]) <= np.abs(signal(cancel_at, FADE)) + 1e-7)
    restart = r["events"][2]["tap_index"]
    assert not out[cancel_at + FADE : restart].any()
    (ack,) = [m for m in r["messages"] if m["type"] == "cancelled"]
    assert ack["played_pts"] == cancel_at and ack["cancel_pts"] == cancel_at + FADE
    np.testing.assert_array_equal(out[restart : restart + 10 * FRAME], signal(30_000, 10 * FRAME))
    # While idle after the cancel, the played position is the server's cancel point once it is known.
    idle = [m["played_pts"] for m in r["reports"] if cancel_at + FADE < m["frame"] < restart]
    assert idle[0] == cancel_at + FADE and idle[-1] == 30_000
    assert r["reports"][-1]["played_pts"] == 30_000 + 10 * FRAME
    assert r["reports"][-1]["underruns"]["events"] == 0

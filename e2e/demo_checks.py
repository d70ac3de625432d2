"""Checks on what the demo played: sample-exact comparison with what the server sent (PCM, Opus through libopus),
and gap attribution (a stall the machine's load caused, against one the server caused)."""

from __future__ import annotations

import base64
import math

import numpy as np
import opuslib
from demo_page import record, server_lags_over

VIOLATION_MS = 10  # a stall longer than this is a violation (docs/protocol.md, Stalls)
FADE = 241  # samples of one fade of the worklet's (5 ms at the highest rate, 48 kHz), and one more


def pcm_sent(frames: list[dict]) -> np.ndarray:
    data = b"".join(base64.b64decode(f["payload"]) for f in frames)
    return np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768


def opus_reference(frames: list[dict], frame_ms: int) -> np.ndarray:
    """The server's own libopus (through opuslib) decoding the packets the page received, at 48 kHz, with the
    pre-skip trimmed the way the frame headers count it."""
    out = []
    decoder = None
    for f in frames:
        if not f["samples"]:  # an empty LAST frame: no packet
            continue
        if decoder is None or f["flags"] & 8:  # CODEC_RESET
            decoder = opuslib.Decoder(48_000, 1)
        pcm = np.frombuffer(decoder.decode_float(base64.b64decode(f["payload"]), 48 * frame_ms), dtype=np.float32)
        out.append(pcm[len(pcm) - f["samples"] :])
    return np.concatenate(out)


def played_runs(events: list[dict], start_pts: int, n: int) -> list[tuple[int, int, int]]:
    """(tap index, offset into the context's audio, length) of each stretch the worklet played without a stall. A
    stall (the machine's, see load_caused) inserts silence, so the audio is compared run by run."""

    def ours(e: dict) -> bool:  # a run starts inside the context's audio; a stall ends one there or at its end
        if e["kind"] == "stall":
            return start_pts < e["pts"] <= start_pts + n
        return e["kind"] in ("start", "resume") and start_pts <= e["pts"] < start_pts + n

    runs, begin = [], None
    for e in sorted(filter(ours, events), key=lambda e: e["tap_index"]):
        if e["kind"] != "stall":
            begin = begin or e
        elif begin is not None:
            runs.append((begin, e["pts"]))
            begin = None
    if begin is not None:
        runs.append((begin, start_pts + n))
    return [(b["tap_index"], b["pts"] - start_pts, end - b["pts"]) for b, end in runs]


def assert_same_audio(got: np.ndarray, want: np.ndarray, atol: float = 0.0) -> None:
    """Sample for sample, except in fades: a buffer that runs dry (or nearly: the worklet cannot know a frame will
    come in time) fades its tail out and the next audio in. There a sample may only be quieter than the one sent,
    and each faded stretch is at most a fade out and a fade in long."""
    bad = np.flatnonzero(np.abs(got - want) > atol)
    if not len(bad):
        return
    assert np.all(np.abs(got[bad]) <= np.abs(want[bad]) + atol) and np.all(got[bad] * want[bad] >= -atol), \
        f"{len(bad)} samples differ, not as a fade; first at {bad[0]}: {got[bad[0]]} != {want[bad[0]]}"
    stretches = np.split(bad, np.flatnonzero(np.diff(bad) > FADE) + 1)
    assert all(s[-1] - s[0] < 2 * FADE for s in stretches), [(s[0], s[-1]) for s in stretches]


def assert_played(samples: np.ndarray, events: list[dict], start_pts: int, sent: np.ndarray,
                  atol: float = 0.0) -> None:
    """The tap holds what was sent, run by run between stalls (assert_same_audio)."""
    runs = played_runs(events, start_pts, len(sent))
    assert runs and runs[0][1] == 0 and sum(length for _, _, length in runs) == len(sent), runs
    for index, offset, length in runs:
        assert_same_audio(samples[index : index + length], sent[offset : offset + length], atol)


def server_lag_ms(page) -> float:
    """A lower bound of the gateway's worst event-loop lag since open_demo (0 if none over the first bound)."""
    now = server_lags_over(page.gateway)
    return max((le * 1000 for le, n in now.items() if n > page.server_lags.get(le, 0) and le < math.inf), default=0)


def browser_lags(page) -> list[dict]:
    """Every late timer of LAG_PROBE's: `t` (epoch ms) when it fired, `ms` how late."""
    return [lag for scope in (page, *page.workers) for lag in scope.evaluate("globalThis.__lags || []")]


def server_stalls(page) -> list[dict]:
    """The server's `stall` messages, each with `received_at` (epoch ms) when the page got it."""
    return [{**m["msg"], "received_at": m["t"]} for m in record(page)["messages"] if m["msg"]["type"] == "stall"]


def load_caused(stall: dict, lags: list[dict], server_lag: float = 0.0) -> bool:
    """The machine's load, not the server: the browser was itself stalled for at least half the gap in the 2 s
    before the stall's report reached it, and either the server sent the audio in time (cause `network` or
    `client`) or it sent late (`pacing`) because its own event loop was held up as long (`server_lag`, ms). A
    `generation` gap, or a late send while the browser ran freely, is the server's. Audio sent in time counts the
    browser's stalls of the 2 s after the report too: the page's lag timer samples the load only where its own
    thread runs, and a frame that waited in the browser's network process showed no lag there before the report
    (a `network` gap of 58.5 ms with the page's 49 and 59 ms lags 1.1 s after it, under `pytest -n 3`)."""
    sent_in_time = stall["cause"] in ("network", "client")
    since = stall["received_at"] - stall["duration_ms"] - 2000
    until = stall["received_at"] + (2000 if sent_in_time else 0)
    # A lag is the interval [t - ms, t] its timer waited; its part inside the window counts (a 514 ms lag whose
    # timer fired 2 ms after the report arrived held the browser through the whole stall).
    blocked = sum(max(0.0, min(lag["t"], until) - max(lag["t"] - lag["ms"], since)) for lag in lags)
    if blocked < stall["duration_ms"] / 2:
        return False
    return sent_in_time or (stall["cause"] == "pacing" and server_lag >= stall["duration_ms"] / 2)


def assert_no_violation(page, context: dict) -> None:
    """No gap over VIOLATION_MS, except one the machine's load caused (see load_caused); a server-caused one fails."""
    st = page.evaluate("({report: window.voxgate.state.report})")
    lags, server_lag = browser_lags(page), server_lag_ms(page)
    over = [s for s in server_stalls(page) if s["duration_ms"] > VIOLATION_MS]
    assert all(load_caused(s, lags, server_lag) for s in over), (
        server_lag, [(s["cause"], s["duration_ms"], s["received_at"]) for s in over],
        [(round(g["t"]), round(g["ms"])) for g in lags])
    allowed_ms = max([VIOLATION_MS, *(s["duration_ms"] + 1 for s in over)])  # the excused gaps, as the page saw them
    assert st["report"]["underruns"]["max_gap_ms"] <= allowed_ms, (st["report"]["underruns"], over, lags)
    assert context["done"]["stalls"]["max_ms"] <= allowed_ms, context["done"]["stalls"]

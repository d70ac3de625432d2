"""Driving the demo page in Chromium: open it (with the audio tap, the frame record and the lag probes), pick a
sample and speak, wait for playback, read back what the worklet played and what the worker received."""

from __future__ import annotations

import base64
import itertools
import math
import os
import re
import shutil
from pathlib import Path
from urllib.parse import urlencode

import httpx
import numpy as np
from browser_paths import ARTIFACTS, ROOT

# The browser's own stalls, measured in the page: a 10 ms timer on the main thread and in each worker records how late
# it fired. The server and the browser share the machine's cores; when other work starves the browser, its timers
# fire late too, and a gap it hears then is the machine's, not the server's.
LAG_PROBE = """() => { if (globalThis.__lags) return; globalThis.__lags = []; let last = performance.now();
  setInterval(() => { const now = performance.now(), late = now - last - 10; last = now;
    if (late > 20) globalThis.__lags.push({t: performance.timeOrigin + now, ms: late}); }, 10); }"""


def open_demo(page, base: str, **params: object) -> None:
    query = urlencode({"tap": 60, "record": 1, **params})
    page.goto(f"{base}/?{query}")
    page.evaluate("window.voxgate.ready")
    page.wait_for_function("document.querySelectorAll('#voice option').length > 0")
    for scope in (page, *page.workers):
        scope.evaluate(LAG_PROBE)
    page.gateway, page.server_lags = base, server_lags_over(base)


def speak(page, sample: str, mode: str = "words") -> str:
    page.click(f"#samples >> text={sample}")
    page.select_option("#mode", mode)
    page.click("#speak")
    page.wait_for_function("window.voxgate.state.current !== null")
    return page.evaluate("window.voxgate.state.current")


def wait_played(page, context_id: str, seconds: float, timeout_s: float = 30) -> None:
    """Until the context has played `seconds` of audio past its start."""
    page.wait_for_function(
        """([id, s]) => { const st = window.voxgate.state, c = st.contexts[id];
             return c && c.started && st.report &&
               st.report.played_pts - c.started.start_pts >= s * st.session.audio.sample_rate; }""",
        arg=[context_id, seconds],
        timeout=timeout_s * 1000,
    )


def wait_buffered(page, ms: float, timeout_s: float = 10) -> None:
    """Until the player's latest report holds at least `ms` of audio not yet played."""
    page.wait_for_function(
        "(ms) => { const st = window.voxgate.state;"
        " return st.report && st.report.buffered_samples >= ms / 1000 * st.session.audio.sample_rate; }",
        arg=ms,
        timeout=timeout_s * 1000,
    )


def wait_done(page, context_id: str, timeout_s: float = 60) -> dict:
    page.wait_for_function(
        """(id) => { const st = window.voxgate.state;
             return st.contexts[id] && st.contexts[id].done && st.report && st.report.state === 'idle'; }""",
        arg=context_id,
        timeout=timeout_s * 1000,
    )
    return page.evaluate("(id) => window.voxgate.state.contexts[id]", context_id)


def tap(page) -> tuple[np.ndarray, list[dict]]:
    t = page.evaluate("window.voxgate.tap()")
    return np.frombuffer(base64.b64decode(t["b64"]), dtype=np.float32), t["events"]


def record(page) -> dict:
    return page.evaluate("window.voxgate.record()")


def frames_of(rec: dict, ctx: int) -> list[dict]:
    frames = sorted((f for f in rec["frames"] if f["ctx"] == ctx), key=lambda f: f["seq"])
    pts = [f["pts"] for f in frames]
    assert pts == sorted(pts) and all(a["pts"] + a["samples"] == b["pts"] for a, b in itertools.pairwise(frames))
    return frames


def screenshot(page, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / name
    page.screenshot(path=str(path))
    if name == "demo-pcm.png" and os.environ.get("VOXGATE_UPDATE_DEMO_PNG") == "1":
        shutil.copyfile(path, ROOT / "docs" / "demo.png")
    return path


def server_lags_over(base: str) -> dict[float, float]:
    """The gateway's own event-loop lag so far: for each histogram bound (s), how many lags were longer."""
    text = httpx.get(f"{base}/metrics", timeout=10).text
    bucket = r'voxgate_event_loop_lag_seconds_bucket\{le="([^"]+)"\} (\S+)'
    counts = {float(le): float(n) for le, n in re.findall(bucket, text)}
    return {le: counts[math.inf] - n for le, n in counts.items()}

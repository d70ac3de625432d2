"""demo_checks.load_caused on recorded numbers (no browser): which gaps the machine's load excuses."""

from __future__ import annotations

from demo_checks import load_caused

REPORT_AT = 1_000_000.0  # when the stall's report reached the page (epoch ms)


def stall(cause: str, ms: float = 58.5) -> dict:
    return {"cause": cause, "duration_ms": ms, "received_at": REPORT_AT}


def lag(at: float, ms: float) -> dict:
    return {"t": REPORT_AT + at, "ms": ms}


def test_audio_sent_in_time_is_excused_by_the_browsers_stalls_on_either_side_of_the_report():
    # the suite's case: 24 ms of lag before the report, 49 and 59 ms 1.1 s after it
    lags = [lag(-495, 24), lag(1099, 49), lag(1101, 59)]
    assert load_caused(stall("network"), lags) and load_caused(stall("client"), lags)
    assert not load_caused(stall("network"), [lag(-495, 24)])  # the browser ran freely: not excused
    assert not load_caused(stall("network"), [lag(2600, 80)])  # its stall came too late to be this one's


def test_a_late_send_needs_the_browser_stalled_before_the_report_and_the_server_held_up():
    after = [lag(1099, 49), lag(1101, 59)]
    assert not load_caused(stall("pacing"), after, server_lag=60)  # only after the report: not this gap
    before = [lag(-10, 40)]
    assert load_caused(stall("pacing"), before, server_lag=40)
    assert not load_caused(stall("pacing"), before, server_lag=5)  # the server's own lateness
    assert not load_caused(stall("generation"), before + after, server_lag=100)  # never the machine's

"""The listener's pause rule on hand-made arrival traces: (arrival_s, duration_s) per chunk."""

from __future__ import annotations

import pytest
from voxgate.gateway.bench.playback import listen


def test_no_pause_when_chunks_arrive_early() -> None:
    # 1 s of audio per chunk, each arriving well before the previous one has played out
    heard = listen([(0.0, 1.0), (0.1, 1.0), (0.2, 1.0), (1.9, 1.0)])
    assert heard.pauses == []
    assert heard.total_pause_s == 0.0
    assert heard.max_pause_s == 0.0
    assert heard.audio_s == 4.0
    assert heard.start == 0.0
    assert heard.end == 4.0


def test_arrival_exactly_at_the_deadline_is_no_pause() -> None:
    assert listen([(0.0, 0.5), (0.5, 0.5), (1.0, 0.5)]).pauses == []


def test_one_pause_of_exactly_the_late_time() -> None:
    # the deadline after chunk 1 is 10.0 + 0.25; chunk 2 arrives 0.125 s later (binary fractions: exact floats)
    heard = listen([(10.0, 0.25), (10.375, 0.25)])
    assert heard.pauses == [0.125]
    assert heard.num_pauses == 1
    assert heard.total_pause_s == 0.125
    assert heard.end == 10.625


def test_deadline_restarts_at_a_late_arrival() -> None:
    # chunk 2 is 0.5 s late; playback resumes at its arrival (1.5), so its 1 s lasts to 2.5.
    # chunk 3 at 2.25 is then on time. A rule that kept the old timeline (deadline 3.0 after two chunks) or
    # one that compared gaps would judge chunk 4 differently: at 3.25 it is 0.25 s late against 3.0 only
    # when the deadline restarted at 1.5 (2.5 + 0.5 = 3.0).
    heard = listen([(0.0, 1.0), (1.5, 1.0), (2.25, 0.5), (3.25, 0.5)])
    assert heard.pauses == [0.5, 0.25]
    assert heard.end == 3.75


def test_early_buffer_absorbs_jitter_only_as_far_as_it_lasts() -> None:
    # a 2 s first chunk buys 2 s; chunk 2 at 1.0 (early) extends to 2.5; chunk 3 at 2.75 is 0.25 s late even
    # though every gap between arrivals (1.0, 1.75) is shorter than the chunk before it
    heard = listen([(0.0, 2.0), (1.0, 0.5), (2.75, 0.5)])
    assert heard.pauses == [0.25]


def test_pauses_accumulate_over_several_late_chunks() -> None:
    chunks = [(0.0, 0.5), (0.625, 0.5), (1.25, 0.5), (2.0, 0.5), (2.5, 0.5)]
    heard = listen(chunks)
    # deadlines: 0.5 -> late 0.125 -> 1.125 -> late 0.125 -> 1.75 -> late 0.25 -> 2.5 -> on time -> 3.0
    assert heard.pauses == [0.125, 0.125, 0.25]
    assert heard.total_pause_s == 0.5
    assert heard.max_pause_s == 0.25
    assert heard.num_pauses == 3
    assert heard.end == 3.0


def test_empty_trace_and_single_chunk() -> None:
    empty = listen([])
    assert empty.pauses == [] and empty.start is None and empty.end is None and empty.audio_s == 0.0
    single = listen([(4.0, 0.25)])
    assert single.pauses == [] and single.end == 4.25


def test_zero_length_chunks_do_not_extend_the_deadline() -> None:
    heard = listen([(0.0, 0.0), (0.25, 0.5)])
    assert heard.pauses == [0.25]


def test_rejects_out_of_order_or_negative_chunks() -> None:
    with pytest.raises(ValueError, match="in order"):
        listen([(1.0, 0.1), (0.5, 0.1)])
    with pytest.raises(ValueError, match="non-negative"):
        listen([(0.0, -0.1)])

"""The engine core without a model, its scheduling: the ring's bound, rows to the streams closest to a stall,
admission and chunked prefill, urgent listeners, abort, streams far ahead of their listener."""

from __future__ import annotations

from engine_core_support import FakeRunner, Pool
from engine_core_support import make_request as _request
from voxgate.engine.core import EngineCore
from voxgate.engine.request import FRAME_S, Status
from voxgate.engine.scheduler import Scheduler, SchedulerConfig


def test_a_stream_never_runs_further_ahead_of_its_codec_than_the_ring_holds() -> None:
    scheduler = Scheduler(SchedulerConfig(max_pending_frames=10), Pool(4))
    r = _request(tokens=2, budget=100)
    scheduler.add(r)
    scheduler.schedule()
    r.num_prefilled, r.num_frames, r.num_launched = 2, 9, 9
    assert scheduler.schedule().decodes == [r]
    r.num_launched = 10  # ten frames (one still in a step in flight) wait for the codec: no row until some decode
    assert scheduler.schedule().decodes == []
    r.num_decoded = 4
    assert scheduler.schedule().decodes == [r]


def test_rows_go_to_the_streams_closest_to_a_stall() -> None:
    clock = [100.0]
    scheduler = Scheduler(SchedulerConfig(max_rows=2), Pool(8), clock=lambda: clock[0])
    requests = [_request(tokens=4) for _ in range(4)]
    for r in requests:
        scheduler.add(r)
    scheduler.schedule()  # admits all four (prefill)
    for r in requests:
        r.num_prefilled = r.num_prompt_tokens
        r.first_audio_at, r.num_decoded = 90.0, 0
    ahead = [5.0, 0.1, 3.0, 0.5]  # seconds each listener has left
    for r, s in zip(requests, ahead, strict=True):
        r.report_playback(s, now=clock[0])
    assert scheduler.schedule().decodes == [requests[1], requests[3]]
    scheduler.config.deadline_order = False  # round robin: everyone in turn
    seen = {id(r) for _ in range(2) for r in scheduler.schedule().decodes}
    assert len(seen) == 4


def test_admission_waits_for_slots_and_long_prompts_are_split() -> None:
    scheduler = Scheduler(SchedulerConfig(max_rows=8, max_prefill_tokens=16, max_prefills=4), Pool(2))
    long, a, b = _request(tokens=40), _request(tokens=5), _request(tokens=5)
    for r in (long, a, b):
        scheduler.add(r)
    plan = scheduler.schedule()
    assert [(p.request, p.start, p.count) for p in plan.prefills] == [(long, 0, 16)]  # the token budget is spent
    long.num_prefilled += 16
    plan = scheduler.schedule()
    assert [(p.request, p.start, p.count) for p in plan.prefills] == [(long, 16, 16)]
    long.num_prefilled += 16
    plan = scheduler.schedule()
    assert [(p.request, p.count) for p in plan.prefills] == [(long, 8), (a, 5)]  # two slots: b waits
    assert list(scheduler.waiting) == [b] and plan.prefills[0].completes


def test_urgent_listeners_get_short_chunks_and_the_hint_counts_audio_decoded_since() -> None:
    clock = [10.0]
    scheduler = Scheduler(SchedulerConfig(urgent_s=0.15), Pool(4), clock=lambda: clock[0])
    r = _request(tokens=2, schedule=(8,))
    scheduler.add(r)
    scheduler.schedule()
    r.num_prefilled, r.num_frames = 2, 3
    assert scheduler.due_pieces(16) == []  # 3 of 8 frames, not yet playing: wait for the chunk
    assert scheduler.due_pieces(2) == [(r, 2, False)]  # pieces of 2: the first is full
    r.first_audio_at, r.num_decoded, r.num_delivered, r.num_frames = 9.0, 8, 8, 11
    r.report_playback(0.1, now=clock[0])  # 100 ms left: a short chunk now beats a pause
    assert scheduler.due_pieces(16) == [(r, 3, True)]
    r.num_decoded += 3  # decoded, not yet handed over: the listener's deadline stays
    assert abs(r.deadline() - (clock[0] + 0.1)) < 1e-9
    r.num_delivered += 3  # those frames reach the listener: the hint's deadline moves by their length
    assert abs(r.deadline() - (clock[0] + 0.1 + 3 * FRAME_S)) < 1e-9


def test_a_stream_short_of_input_hands_over_its_decoded_pieces_before_its_listener_runs_dry() -> None:
    """Frames that come slower than real time (text streamed in) fill a wide chunk slowly: its decoded pieces go
    out, closing the chunk early, once the listener would run dry within urgent_s, not when the chunk is full."""
    clock = [100.0]
    runner = FakeRunner(((4, 4),))
    core = EngineCore(runner, Pool(2), SchedulerConfig(urgent_s=0.15))
    core.scheduler.clock = lambda: clock[0]
    r = _request(tokens=2, budget=100, schedule=(1, 16))
    r.frames_ready, r.arrival = 5, clock[0]  # the first words' frames: one for the first chunk, four more
    core.add(r)
    heard: list[tuple[float, int]] = []  # (time, frames) of each chunk handed over

    def step() -> None:
        for request, pcm in core.step().chunks:
            assert request is r
            heard.append((clock[0], len(pcm) // 1920))

    for _ in range(4):  # prefill, the first frame, its chunk
        step()
    assert heard == [(100.0, 1)]
    r.first_audio_at = clock[0]  # playback starts now (the core stamps the monotonic clock)
    for _ in range(4):  # frames 2-5 made and decoded (the chunk of 16 stays open)
        step()
    for tick in range(1, 12):  # one more frame's input every 60 ms (80 ms of audio each): 11 frames in 0.66 s
        clock[0] = 100.0 + 0.06 * tick
        r.frames_ready += 1
        step()
        step()
    # played from 100.0 at 1x: the listener must never wait
    end = heard[0][0]
    for at, frames in heard:
        assert at <= end + 1e-9, heard
        end = max(end, at) + frames * FRAME_S
    assert end >= clock[0], heard  # nor be waiting now, with frames decoded into the open chunk
    assert sum(f for _, f in heard) >= 12, heard


def test_abort_frees_the_slot_and_drops_audio_in_flight() -> None:
    runner = FakeRunner()
    pool = Pool(2)
    core = EngineCore(runner, pool, SchedulerConfig(urgent_s=0))
    r = _request(budget=50, schedule=(1,))
    core.add(r)
    for _ in range(4):
        core.step()
    assert runner.chunks.in_flight
    core.abort(r)
    assert r.status is Status.ABORTED and pool.available == [2, 1]
    out = core.step()
    assert out.chunks == [] and not core.has_work


def test_a_stream_far_ahead_of_its_listener_waits() -> None:
    clock = [50.0]
    scheduler = Scheduler(SchedulerConfig(max_ahead_s=30.0), Pool(4), clock=lambda: clock[0])
    r = _request(tokens=2)
    scheduler.add(r)
    scheduler.schedule()
    r.num_prefilled = 2
    r.report_playback(31.0, now=clock[0])  # a reader that stopped: its audio piles up unplayed
    assert scheduler.schedule().decodes == []
    clock[0] += 2.0  # the listener caught up by two seconds
    assert scheduler.schedule().decodes == [r]

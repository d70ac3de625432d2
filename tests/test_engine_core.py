"""The engine core without a model, its steps: every frame reaches the listener, a prompt's first frame, codec calls
within a bucket, pipelining, pieces handed over whole."""

from __future__ import annotations

import pytest
from engine_core_support import FakeRunner, Pool
from engine_core_support import make_request as _request
from engine_core_support import run_core as _run
from voxgate.engine.base import SynthesisRequest
from voxgate.engine.core import EngineCore
from voxgate.engine.loop import EngineLoop
from voxgate.engine.request import Status
from voxgate.engine.scheduler import SchedulerConfig


@pytest.mark.parametrize("first_frames", [True, False])
@pytest.mark.parametrize("pipeline", [True, False])
def test_every_frame_reaches_the_listener_and_streams_finish_after_their_last_chunk(pipeline: bool,
                                                                                   first_frames: bool) -> None:
    runner = FakeRunner(first_frame_with_prompt=first_frames)
    core = EngineCore(runner, Pool(8), SchedulerConfig(max_rows=16, max_prefill_tokens=32, urgent_s=0),
                      pipeline=pipeline)
    requests = [_request(budget=5 + i, schedule=((1, 2, 4), (16,), (3,))[i % 3]) for i in range(6)]
    runner.eos_at[requests[1].request_id] = 3  # stops early on EOS: 3 frames
    for r in requests:
        core.add(r)
    audio: dict[int, int] = {}
    finished: set[int] = set()
    for out in _run(core):
        for r, pcm in out.chunks:  # a step hands over its chunks before its ends: never audio after an end
            assert r.request_id not in finished
            audio[r.request_id] = audio.get(r.request_id, 0) + len(pcm) // 1920
        for r in out.finished:
            assert r.status is Status.FINISHED and r.pending_frames == 0
            finished.add(r.request_id)
    for r in requests:
        assert audio[r.request_id] == r.num_frames == (3 if r is requests[1] else r.frame_budget)
        assert r.finish_reason == ("eos" if r is requests[1] else "budget")


@pytest.mark.parametrize("pipeline", [True, False])
async def test_a_stream_tells_its_first_audio_stages_in_order(pipeline: bool) -> None:
    """The first-audio timeline's engine stamps (engine/timeline.py): a prompt over three steps, its first frame's
    step, that frame counted, its chunk decoded, handed to the event loop; each once, in that order."""
    core = EngineCore(FakeRunner(), Pool(2), SchedulerConfig(max_rows=16, max_prefill_tokens=4, urgent_s=0),
                      pipeline=pipeline)
    loop = EngineLoop(core)
    loop.start()
    try:
        request = _request(tokens=10, budget=6, schedule=(2, 4))
        stream = loop.submit(SynthesisRequest("hi"), request)
        chunks = aiter(stream)
        first = await anext(chunks)
        stamps = stream.first_audio_stamps()
        assert len(first) == 2 * 1920 and [len(c) async for c in chunks] == [4 * 1920]
    finally:
        await loop.stop()
    assert list(stamps) == ["queue", "prefill", "first_frame", "codec", "hand_over"]
    assert request.arrival <= stamps["queue"] < stamps["prefill"] <= stamps["first_frame"] <= stamps["codec"] \
        <= stamps["hand_over"]
    assert stream.first_audio_stamps() == stamps  # stamped once: later chunks change nothing


@pytest.mark.parametrize("pipeline", [True, False])
def test_a_first_chunk_is_handed_over_before_the_step_in_flight_is_waited_for(pipeline: bool) -> None:
    """core.early_first_chunk: the codec call that carries a stream's first chunk is collected and handed over
    before the step's wait for the GPU; every other chunk leaves with its step. The audio is the same either way."""
    def run(early: bool) -> tuple[list[tuple[str, int]], dict[int, list[int]]]:
        runner = FakeRunner()
        events: list[tuple[str, int]] = []
        finish = runner.finish
        runner.finish = lambda handle: (events.append(("wait", 0)), finish(handle))[1]  # type: ignore[method-assign]
        core = EngineCore(runner, Pool(8), SchedulerConfig(max_rows=16, max_prefill_tokens=32, urgent_s=0),
                          pipeline=pipeline, early_first_chunk=early, early_end=False)
        core.hand_over_early = lambda chunks, _: events.extend(("early", r.request_id) for r, _ in chunks)
        requests = [_request(tokens=10 + 20 * i, budget=6 + i, schedule=(1, 2, 4)) for i in range(4)]
        for r in requests:
            core.add(r)
        audio: dict[int, list[int]] = {r.request_id: [] for r in requests}
        for out in _run(core):
            for r, pcm in [*out.handed_early, *out.chunks]:
                audio[r.request_id].append(len(pcm) // 1920)
            events.extend(("step", r.request_id) for r, _ in out.chunks)
        return events, {i: chunks for i, (_, chunks) in enumerate(sorted(audio.items()))}

    events, audio = run(early=True)
    plain_events, plain_audio = run(early=False)
    assert audio == plain_audio  # the same chunks, in the same order per stream
    chunk_events = [(kind, rid) for kind, rid in events if kind != "wait"]
    for rid in {rid for _, rid in chunk_events}:  # every stream's first chunk went early (with its whole call)
        assert next(kind for kind, r in chunk_events if r == rid) == "early"
    for at, (kind, _) in enumerate(events):  # an early hand-over comes before its step's wait for the GPU
        if kind == "early" and at + 1 < len(events) and events[at + 1][0] != "early":
            assert events[at + 1] == ("wait", 0) or not pipeline
    assert not any(kind == "early" for kind, _ in plain_events)


@pytest.mark.parametrize("pipeline", [True, False])
def test_a_streams_last_chunk_and_end_are_handed_over_before_the_step_in_flight_is_waited_for(pipeline: bool) -> None:
    """core.early_end: the codec call that holds a stream's last frames is collected before the step's wait for the
    GPU, and the stream's last chunk and its end go with it, so a stream that ends among others that keep speaking
    ends before that step's wait, not after it. The audio is the same either way, none after an end, every stream
    ends once."""
    def run(early_end: bool) -> tuple[dict[int, list[int]], dict[int, int], list[tuple[str, int]]]:
        runner = FakeRunner()
        waits = [0]
        finish = runner.finish
        runner.finish = lambda handle: (waits.__setitem__(0, waits[0] + 1), finish(handle))[1]  # type: ignore
        core = EngineCore(runner, Pool(8), SchedulerConfig(max_rows=16, max_prefill_tokens=64, urgent_s=0),
                          pipeline=pipeline, early_first_chunk=False, early_end=early_end)
        events: list[tuple[str, int]] = []
        ended_at: dict[int, int] = {}  # request id -> GPU waits before its end was handed over

        def hand(chunks: list, finished: list) -> None:
            events.extend(("chunk", r.request_id) for r, _ in chunks)
            for r in finished:
                events.append(("end", r.request_id))
                ended_at[r.request_id] = waits[0]
        core.hand_over_early = hand
        requests = [_request(tokens=8, budget=5 + 3 * i, schedule=(1, 2, 4)) for i in range(4)]
        runner.eos_at[requests[2].request_id] = 6  # stops on EOS, learnt a step late when pipelined
        for r in requests:
            core.add(r)
        audio: dict[int, list[int]] = {r.request_id: [] for r in requests}
        while core.has_work:  # (step by step: the early hand-overs interleave with the steps' own)
            out = core.step()
            assert not (out.finished and out.finished_early)
            for r, pcm in [*out.handed_early, *out.chunks]:
                audio[r.request_id].append(len(pcm) // 1920)
            events.extend(("chunk", r.request_id) for r, _ in out.chunks)
            for r in out.finished:
                events.append(("end", r.request_id))
                ended_at[r.request_id] = waits[0]
        for r in requests:
            assert r.status is Status.FINISHED and sum(audio[r.request_id]) == r.num_frames
        ids = [r.request_id for r in requests]
        return ({i: audio[rid] for i, rid in enumerate(ids)}, {i: ended_at[rid] for i, rid in enumerate(ids)},
                events)

    audio, ended_at, events = run(early_end=True)
    plain_audio, plain_ended_at, plain_events = run(early_end=False)
    assert audio == plain_audio  # the same chunks, in the same order per stream
    for kinds in (events, plain_events):
        for rid in {rid for _, rid in kinds}:  # once each, nothing after its end
            assert [k for k, r in kinds if r == rid][-1] == "end" and kinds.count(("end", rid)) == 1
    assert all(ended_at[i] <= plain_ended_at[i] for i in ended_at)
    # every stream but the last to end ends among others that speak on: a GPU wait sooner
    assert [i for i in ended_at if ended_at[i] < plain_ended_at[i]] == [0, 1, 2]


@pytest.mark.parametrize("first_frames", [True, False])
def test_a_prompt_that_fits_a_step_makes_its_first_frame_in_it(first_frames: bool) -> None:
    """A runner with first_frame_with_prompt makes a stream's first frame in its prompt's step (one step from
    submission to the frame, not two); every frame reaches the listener either way. A prompt's last token
    waits for the text its first frame's next input adds (a stream whose text is still arriving)."""
    runner = FakeRunner(first_frame_with_prompt=first_frames)
    core = EngineCore(runner, Pool(2), SchedulerConfig(max_prefill_tokens=32, urgent_s=0), pipeline=False)
    r = _request(tokens=10, budget=3, schedule=(1,))
    core.add(r)
    steps = 0
    while r.num_frames == 0:
        core.step()
        steps += 1
    assert steps == (1 if first_frames else 2)
    assert [len(p.sampled) for p in runner.plans] == ([1] if first_frames else [0, 1])
    _run(core)
    assert r.num_frames == r.num_delivered == 3 and r.status is Status.FINISHED

    waits = _request(tokens=10, budget=2, schedule=(1,))
    waits.frames_ready = 0  # no text id for its first frame's next input yet
    core.add(waits)
    core.step()
    assert waits.num_prefilled == (9 if first_frames else 10) and waits.num_frames == 0
    assert core.step().idle and waits.num_frames == 0  # nothing can go on until text comes
    waits.frames_ready = 1
    core.step()
    assert waits.num_prefilled == 10 and waits.num_frames == 1
    assert runner.plans[-1].sampled == [waits]


def test_a_codec_call_takes_only_what_a_bucket_holds() -> None:
    """Many streams due wide chunks at once (closed loop at high concurrency): never a call no bucket holds; the
    rest waits and still gets every frame."""
    runner = FakeRunner(buckets=((16, 1), (4, 4), (2, 16)))
    core = EngineCore(runner, Pool(40), SchedulerConfig(max_rows=40, max_prefill_tokens=400, max_prefills=40,
                                                        urgent_s=0))
    requests = [_request(budget=40, schedule=(16,)) for _ in range(20)]
    for r in requests:
        core.add(r)
    _run(core)
    for call in runner.chunks.calls:
        assert runner.chunks.bucket_for(len(call), max(n for _, n in call)) is not None
    assert all(r.num_decoded == 40 for r in requests)


@pytest.mark.parametrize("first_frames", [True, False])
def test_only_steps_with_pipeline_min_rows_rows_leave_a_step_queued(first_frames: bool) -> None:
    """pipeline_min_rows: a step with fewer sampled rows is read before the next is launched (a new stream then
    waits behind no queued step); one with that many, or with prompt pieces only (no frame to read), is not. The
    audio is the same either way. By default (1) every step that makes a frame leaves one queued."""
    def run(streams: int, min_rows: int | None = 3) -> tuple[list[tuple[str, int]], dict[int, int]]:
        runner = FakeRunner(first_frame_with_prompt=first_frames)
        order: list[tuple[str, int]] = []
        launch, finish = runner.launch, runner.finish
        runner.launch = lambda plan: (order.append(("launch", len(plan.sampled))), launch(plan))[1]  # type: ignore
        runner.finish = lambda handle: (order.append(("finish", 0)), finish(handle))[1]  # type: ignore
        kwargs = {} if min_rows is None else {"pipeline_min_rows": min_rows}  # None: the default
        core = EngineCore(runner, Pool(8), SchedulerConfig(max_rows=8, max_prefill_tokens=64, max_prefills=8,
                                                           urgent_s=0), **kwargs)
        requests = [_request(tokens=100, budget=12) for _ in range(streams)]  # prompts over two steps or more
        for r in requests:
            core.add(r)
        audio = {r.request_id: 0 for r in requests}
        for out in _run(core):
            for r, pcm in [*out.handed_early, *out.chunks]:
                audio[r.request_id] += len(pcm) // 1920
        assert all(frames == 12 for frames in audio.values())
        return order, audio

    def queued_after(order: list[tuple[str, int]]) -> list[int]:
        """For every launch made while a step was still unread: that step's sampled rows."""
        unread: list[int] = []  # sampled rows of the launched steps not yet read
        out: list[int] = []
        for kind, rows in order:
            if kind == "launch":
                out += unread[-1:]
                unread.append(rows)
            else:
                unread.pop(0)
        return out

    small, _ = run(2)
    assert set(queued_after(small)) == {0}  # two rows: read before the next; only steps with no frame stay queued
    large, _ = run(5)
    assert 5 in queued_after(large) and all(rows >= 3 or rows == 0 for rows in queued_after(large))
    alone, _ = run(1, min_rows=None)  # the default (1): one stream's steps leave a step queued too
    assert 1 in queued_after(alone)


def test_pipelined_steps_overlap_and_an_end_learnt_late_drops_only_that_row() -> None:
    """Step N+1 is launched before step N is read; the stream that sampled EOS in N still has a row in N+1, which
    makes no frame and no audio; the slot it frees goes to a waiting stream with nothing of the old one."""
    runner = FakeRunner()
    core = EngineCore(runner, Pool(2), SchedulerConfig(max_rows=4, max_prefill_tokens=32, urgent_s=0),
                      pipeline_min_rows=0)
    order: list[str] = []
    launch, finish = runner.launch, runner.finish
    runner.launch = lambda plan: (order.append("launch"), launch(plan))[1]  # type: ignore[method-assign]
    runner.finish = lambda handle: (order.append("finish"), finish(handle))[1]  # type: ignore[method-assign]
    stops, keeps, waits = _request(budget=20, schedule=(2,)), _request(budget=9), _request(budget=6)
    runner.eos_at[stops.request_id] = 5
    for r in (stops, keeps, waits):
        core.add(r)
    audio: dict[int, int] = {}
    for out in _run(core):
        for r, pcm in out.chunks:
            audio[r.request_id] = audio.get(r.request_id, 0) + len(pcm) // 1920
    assert order[:3] == ["launch", "launch", "finish"]  # the second step was on its way before the first was read
    assert stops.num_launched == 7 and stops.num_frames == 5  # one row launched after its EOS (frame 5): dropped
    assert audio == {stops.request_id: 5, keeps.request_id: 9, waits.request_id: 6}
    assert waits.slot == stops.slot


def test_chunks_are_decoded_in_pieces_and_handed_over_whole() -> None:
    """Every codec call is at most `max_width` wide whatever the schedule; the listener still gets the schedule's
    chunks (pieces joined), the last one short, and one that ends on EOS mid-chunk gets what there is."""
    runner = FakeRunner(buckets=((8, 4),))
    core = EngineCore(runner, Pool(8), SchedulerConfig(max_rows=8, max_prefill_tokens=64, urgent_s=0))
    requests = [_request(budget=23, schedule=(1, 2, 8)), _request(budget=30, schedule=(16,)),
                _request(budget=50, schedule=(6,))]
    runner.eos_at[requests[1].request_id] = 20  # EOS after 20 frames: 16, then 4 of an open 16-frame chunk
    for r in requests:
        core.add(r)
    widths: dict[int, list[int]] = {r.request_id: [] for r in requests}
    for out in _run(core):
        for r, pcm in out.chunks:
            widths[r.request_id].append(len(pcm) // 1920)
    assert all(max(n for _, n in call) <= 4 for call in runner.chunks.calls)
    assert widths[requests[0].request_id] == [1, 2, 8, 8, 4]
    assert widths[requests[1].request_id] == [16, 4]
    assert widths[requests[2].request_id] == [6] * 8 + [2]

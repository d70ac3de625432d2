"""The aligner beside the engine loop (engine/aligner/worker.py, stream.py): batches of waiting segments measured
as each alone, cancelled ones dropped, errors to their streams only; a held stream gives its words before its audio,
none after a cancel. Tiny synthetic aligner, CPU, fp32; the order of events is driven by events, never by time."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
from voxgate.engine.aligner.align import Aligner
from voxgate.engine.aligner.stream import AlignedStream
from voxgate.engine.aligner.worker import AlignerWorker, AlignJob
from voxgate.engine.base import EngineError
from voxgate.engine.words import WordTime, text_words

from .checkpoint import write_sharp_aligner
from .sources import Chunks, pcm

TEXTS = ["Hello there, how are you?", "The birch canoe slid on the smooth planks.", "One.", "它们是你好 world 好的"]


class Gated:
    """An Aligner whose align_batch waits for `release` (set by the test) and records each call's texts."""

    def __init__(self, aligner: Aligner) -> None:
        self.aligner = aligner
        self.thinker = aligner.thinker
        self.calls: list[list[str]] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        self.fail: BaseException | None = None

    def align_batch(self, audios: list[np.ndarray], texts: list[str]) -> list[list[WordTime]]:
        self.calls.append(list(texts))
        self.entered.set()
        assert self.release.wait(60), "the test never released the aligner"
        if self.fail is not None:
            raise self.fail
        return self.aligner.align_batch(audios, texts)


@pytest.fixture(scope="module")
def aligner(tmp_path_factory: pytest.TempPathFactory) -> Aligner:
    # Times under 20 x 80 ms: they fall inside these short clips instead of at their ends.
    return Aligner.from_pretrained(write_sharp_aligner(tmp_path_factory.mktemp("timed-aligner"), classes=20))


@pytest.fixture
def gated(aligner: Aligner) -> Iterator[tuple[Gated, AlignerWorker]]:
    gate = Gated(aligner)
    worker = AlignerWorker(gate)  # type: ignore[arg-type]  (the gate has what the worker uses)
    yield gate, worker
    gate.release.set()
    worker.close()


def as_float(audio: np.ndarray) -> np.ndarray:
    return audio.astype(np.float32) / 32768.0


async def test_waiting_jobs_go_in_one_batch_each_as_alone_cancelled_dropped(
        gated: tuple[Gated, AlignerWorker], aligner: Aligner) -> None:
    gate, worker = gated
    rng = np.random.default_rng(3)
    results: dict[int, Any] = {}
    done = threading.Event()

    def deliver_to(i: int) -> Any:
        def deliver(words: list[WordTime] | None, error: BaseException | None) -> None:
            results[i] = words if error is None else error
            if len(results) == 4:
                done.set()
        return deliver

    first = AlignJob(as_float(pcm(0.5, 0)), "First.", deliver_to(0))
    worker.submit(first)
    assert gate.entered.wait(60)  # the worker is busy with the first: the next ones wait together
    clips = [as_float(pcm(float(rng.uniform(0.4, 2.5)), s)) for s in range(1, 6)]
    jobs = [AlignJob(c, TEXTS[i % len(TEXTS)], deliver_to(i + 1)) for i, c in enumerate(clips)]
    jobs[1].cancelled = True  # cancelled before its batch is taken: never measured, never answered
    jobs[3].cancelled = True
    for job in jobs:
        worker.submit(job)
    gate.release.set()
    assert done.wait(120)
    assert gate.calls == [["First."], [jobs[0].text, jobs[2].text, jobs[4].text]]
    assert sorted(results) == [0, 1, 3, 5] and worker.batches == 2
    for i in (0, 2, 4):
        assert results[i + 1] == aligner.align(clips[i], jobs[i].text)
        assert [w.word for w in results[i + 1]] == [w.text for w in text_words(jobs[i].text)]
    assert results[0] == aligner.align(first.audio, "First.")


async def test_an_error_reaches_its_batch_and_the_worker_goes_on(gated: tuple[Gated, AlignerWorker]) -> None:
    gate, worker = gated
    gate.fail = RuntimeError("boom")
    stream = AlignedStream(Chunks("Hello there.", [pcm(0.3, 1)]), worker)
    gate.release.set()
    with pytest.raises(EngineError, match="word alignment failed: RuntimeError: boom") as caught:
        _ = [c async for c in stream]
    assert caught.value.code == "alignment_failed"
    gate.fail = None
    again = AlignedStream(Chunks("Hello again.", [pcm(0.3, 2)]), worker)
    assert len([c async for c in again]) == 1 and [w.word for w in again.take_words()] == ["Hello", "again."]


@pytest.mark.parametrize("seconds,seed", [(2.3, 0), (1.0, 1)])
async def test_words_come_before_the_audio_and_equal_the_one_clip_alignment(
        gated: tuple[Gated, AlignerWorker], aligner: Aligner, seconds: float, seed: int) -> None:
    gate, worker = gated
    gate.release.set()
    rng = np.random.default_rng(seed)
    audio = pcm(seconds, seed)
    cuts = sorted(rng.choice(np.arange(1, len(audio)), size=4, replace=False))
    chunks = np.split(audio, cuts)
    text = TEXTS[1]
    stream = AlignedStream(Chunks(text, chunks), worker)
    assert stream.take_words() == []
    taken: list[list[WordTime]] = []
    got: list[np.ndarray] = []
    async for chunk in stream:  # as the gateway: the words after each chunk, queued before it
        taken.append(stream.take_words())
        got.append(chunk)
    assert [len(c) for c in got] == [len(c) for c in chunks] and np.array_equal(np.concatenate(got), audio)
    words = [w for batch in taken for w in batch]
    assert words == taken[0]  # all of them before the first chunk: the segment is the whole request
    assert words == aligner.align(as_float(audio), text)
    assert [w.word for w in words] == [w.text for w in text_words(text)]
    assert all(a.start <= b.start for a, b in itertools.pairwise(words))
    assert len({w.start for w in words}) > 1  # the times vary (the checkpoint's attention is sharpened)


async def test_a_cancel_while_aligning_gives_no_words_and_no_audio(gated: tuple[Gated, AlignerWorker]) -> None:
    gate, worker = gated
    stream = AlignedStream(Chunks("Hello there.", [pcm(0.3, 1), pcm(0.2, 2)]), worker)
    chunks = aiter(stream)
    waiting = asyncio.ensure_future(anext(chunks))
    assert await asyncio.to_thread(gate.entered.wait, 60)  # the audio is complete and its alignment running
    stream.cancel()
    gate.release.set()
    with pytest.raises(StopAsyncIteration):
        await waiting
    assert stream.take_words() == []


async def test_a_cancel_while_the_audio_is_made_submits_nothing(gated: tuple[Gated, AlignerWorker]) -> None:
    gate, worker = gated
    step = asyncio.Event()
    inner = Chunks("Hello there.", [pcm(0.3, 1), pcm(0.2, 2)], step)
    stream = AlignedStream(inner, worker)
    waiting = asyncio.ensure_future(anext(aiter(stream)))
    step.set()  # the first chunk is made (and held)
    while step.is_set():
        await asyncio.sleep(0)
    stream.cancel()
    step.set()
    with pytest.raises(StopAsyncIteration):
        await waiting
    assert inner.cancelled.is_set() and stream.take_words() == [] and gate.calls == []


async def test_with_graphs_a_batch_stays_within_their_clips_and_chunks(aligner: Aligner) -> None:
    """With the decoder's and encoder's graphs on, a batch takes at most graph_clips clips and graph_chunks 1-s
    chunks (a larger call would run eagerly); the rest wait for the next call, in order, and a clip longer than
    the chunks alone still goes, alone."""
    import soxr
    from voxgate.engine.aligner.batch import chunk_lengths
    from voxgate.engine.aligner.worker import audio_chunks

    for n in (1, 23_999, 24_000, 24_241, 61_000):  # the chunks the encoder will cut
        frames = len(soxr.resample(np.zeros(n, np.float32), 24_000, 16_000)) // 160
        assert audio_chunks(np.zeros(n)) == max(1, len(chunk_lengths(frames)))
    gate = Gated(aligner)
    worker = AlignerWorker(gate, graphs=True, encoder_graphs=True, graph_clips=3, graph_chunks=4)  # type: ignore[arg-type]
    try:
        done = threading.Event()
        answered: list[int] = []

        def deliver_to(i: int) -> Any:
            def deliver(words: list[WordTime] | None, error: BaseException | None) -> None:
                answered.append(i)
                if len(answered) == 8:
                    done.set()
            return deliver

        worker.submit(AlignJob(as_float(pcm(0.3, 0)), "Busy.", deliver_to(0)))
        assert gate.entered.wait(60)
        seconds = [0.5, 0.5, 0.5, 0.5, 2.5, 5.5, 0.5]  # chunks 1, 1, 1, 1, 3, 6, 1
        for i, s in enumerate(seconds):
            worker.submit(AlignJob(as_float(pcm(s, i + 1)), f"Clip {i}.", deliver_to(i + 1)))
        gate.release.set()
        assert done.wait(120)
        assert gate.calls == [["Busy."], ["Clip 0.", "Clip 1.", "Clip 2."], ["Clip 3.", "Clip 4."], ["Clip 5."],
                              ["Clip 6."]]
        assert sorted(answered) == list(range(8))
    finally:
        gate.release.set()
        worker.close()


def test_prefill_attention_is_asked_for_and_ignored_off_cuda(aligner_ckpt: str) -> None:
    """The engine option's default (true) is a no-op for an aligner on the CPU, where the Triton kernel cannot run
    compiled, instead of a start that fails (Aligner.use_prefill_attention refuses a CPU aligner)."""
    cpu = Aligner.from_pretrained(aligner_ckpt, decoder="packed")
    worker = AlignerWorker(cpu, prefill_attention=True)
    try:
        assert cpu.prefill is False
    finally:
        worker.close()


@pytest.mark.parametrize(("kwargs", "seconds"), [(dict(max_batch=2), [0.5, 0.5]),
                                               (dict(graphs=True, encoder_graphs=True, graph_chunks=4), [2.5, 1.5])])
def test_behind_when_the_waiting_jobs_fill_the_next_call(aligner: Aligner, kwargs: dict, seconds: list) -> None:
    """behind(): the jobs waiting (not the call running) fill max_batch clips, or the encoder graphs' seconds."""
    gate = Gated(aligner)
    worker = AlignerWorker(gate, **kwargs)  # type: ignore[arg-type]
    try:
        done = threading.Event()
        answered: list[int] = []

        def deliver(words: list[WordTime] | None, error: BaseException | None) -> None:
            answered.append(1)
            if len(answered) == 3:
                done.set()

        worker.submit(AlignJob(as_float(pcm(0.3, 0)), "Busy.", deliver))
        assert gate.entered.wait(60)
        assert not worker.behind()  # one call running, none waiting
        worker.submit(AlignJob(as_float(pcm(seconds[0], 1)), "One.", deliver))
        assert not worker.behind()
        worker.submit(AlignJob(as_float(pcm(seconds[1], 2)), "Two.", deliver))
        assert worker.behind()  # two clips, or four chunks, wait: the next call is full
        gate.release.set()
        assert done.wait(120)
        assert not worker.behind()
    finally:
        gate.release.set()
        worker.close()


@contextlib.contextmanager
def _gathering(aligner: Aligner, gather_s: float, **kwargs: Any) -> Iterator[tuple[Gated, AlignerWorker]]:
    """A worker with `gather_s` over a gate that lets every call through, closed after."""
    gate = Gated(aligner)
    gate.release.set()
    worker = AlignerWorker(gate, gather_s=gather_s, **kwargs)  # type: ignore[arg-type]
    try:
        yield gate, worker
    finally:
        worker.close()


def _answers(n: int) -> tuple[threading.Event, Any]:
    """An event set once `n` jobs are answered, and a deliver callback counting them."""
    done, answered = threading.Event(), []

    def deliver(words: list[WordTime] | None, error: BaseException | None) -> None:
        answered.append(error)
        if len(answered) == n:
            done.set()
    return done, deliver


def test_not_held_jobs_wait_together_until_a_call_is_full(aligner: Aligner) -> None:
    """gather_s: jobs no listener waits on (hold=False) wait for more; the job that fills a call (max_batch)
    starts it at once, long before gather_s, with all of them."""
    with _gathering(aligner, 600, max_batch=3) as (gate, worker):
        worker.expect(1)  # a stream still making audio may bring one more
        done, deliver = _answers(3)
        for i in range(2):
            worker.submit(AlignJob(as_float(pcm(0.4, i)), f"Clip {i}.", deliver, hold=False))
        assert not gate.entered.wait(0.3)  # two of three: still gathering
        worker.submit(AlignJob(as_float(pcm(0.4, 2)), "Clip 2.", deliver, hold=False))
        assert done.wait(120)
        assert gate.calls == [["Clip 0.", "Clip 1.", "Clip 2."]]


def test_a_held_job_starts_the_call_with_the_gathered_ones(aligner: Aligner) -> None:
    """A held stream's clip (a listener's audio waits on it) is never gathered: it starts the call at once, with
    the not-held clips that were waiting."""
    with _gathering(aligner, 600) as (gate, worker):
        worker.expect(1)
        done, deliver = _answers(2)
        worker.submit(AlignJob(as_float(pcm(0.4, 0)), "Not held.", deliver, hold=False))
        assert not gate.entered.wait(0.3)
        worker.submit(AlignJob(as_float(pcm(0.4, 1)), "Held.", deliver))
        assert done.wait(120)
        assert gate.calls == [["Not held.", "Held."]]


def test_a_gathered_job_goes_alone_once_its_time_is_up_and_a_close_answers_the_waiting(aligner: Aligner) -> None:
    with _gathering(aligner, 0.05) as (gate, worker):
        worker.expect(1)
        done, deliver = _answers(1)
        worker.submit(AlignJob(as_float(pcm(0.4, 0)), "Alone.", deliver, hold=False))
        assert done.wait(120)
        assert gate.calls == [["Alone."]]
    waiting = AlignerWorker(gate, gather_s=600)  # type: ignore[arg-type]
    waiting.expect(1)
    errors: list[BaseException | None] = []
    waiting.submit(AlignJob(as_float(pcm(0.4, 1)), "Never.", lambda w, e: errors.append(e), hold=False))
    waiting.close()
    assert gate.calls == [["Alone."]] and isinstance(errors[0], RuntimeError)
    with pytest.raises(ValueError, match="gather_s must be >= 0"):
        AlignerWorker(gate, gather_s=-1)  # type: ignore[arg-type]


def test_a_call_gathers_only_while_some_stream_may_still_bring_a_clip(aligner: Aligner) -> None:
    """expect(): with no stream counted as making audio, a not-held clip has no company to wait for and its call
    starts at once, however long gather_s; one counted holds it, and that stream's end (expect(-1)) starts it."""
    with _gathering(aligner, 600) as (gate, worker):
        done, deliver = _answers(1)
        worker.submit(AlignJob(as_float(pcm(0.4, 0)), "Alone.", deliver, hold=False))
        assert done.wait(120)  # long before 600 s
        worker.expect(2)
        done, deliver = _answers(1)
        worker.submit(AlignJob(as_float(pcm(0.4, 1)), "Waits.", deliver, hold=False))
        worker.expect(-1)
        assert not done.wait(0.3) and gate.calls == [["Alone."]]  # one stream may still bring one: gathering
        worker.expect(-1)  # the last one ended without a clip: nothing to wait for
        assert done.wait(120)
        assert gate.calls == [["Alone."], ["Waits."]]


def test_a_priority_that_is_not_one_is_refused(aligner: Aligner) -> None:
    with pytest.raises(ValueError, match="priority must be one of normal, high"):
        AlignerWorker(aligner, priority="urgent")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_high_priority_worker_runs_on_the_devices_highest_priority_stream(aligner_ckpt: str) -> None:
    """engine option aligner_priority = high: the worker's stream (its graphs replay on it) has the greatest
    priority the device offers; normal has the default's."""
    greatest = torch.cuda.Stream(priority=-(1 << 10)).priority
    assert greatest < 0  # the device has priorities to give
    for priority, expected in (("high", greatest), ("normal", 0)):
        worker = AlignerWorker(Aligner.from_pretrained(aligner_ckpt, device="cuda"), warmup=True, priority=priority)
        try:
            assert worker._warmed.wait(300) and worker.stream is not None
            assert worker.stream.priority == expected
        finally:
            worker.close()

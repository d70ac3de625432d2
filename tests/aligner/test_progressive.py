"""Progressive release of a word-times stream (engine/aligner/stream.py with `group_samples`): pieces of audio go out
while the rest is still being made, each after every word that starts in it, with the times a clip's aligner gives,
offset to the stream's timeline; words the clip's end may blur are left to the next clip.

Most tests run on the event loop alone: an aligner that knows the truth (`Truth`) answers inside `submit`, so the
order of events is set by the test's steps. One runs the real worker thread and the tiny synthetic aligner."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable

import numpy as np
import pytest
import torch
from voxgate.engine.aligner.align import Aligner
from voxgate.engine.aligner.stream import FIRST_PIECE_SAMPLES, MAX_WORDS_PER_SECOND, AlignedStream
from voxgate.engine.aligner.worker import AlignerWorker, AlignJob
from voxgate.engine.base import EngineError
from voxgate.engine.words import WordTime, text_words

from .checkpoint import write_sharp_aligner
from .sources import Chunks, pcm

RATE = 24_000
TEXT = "So the birch canoe slid on the smooth planks, glued to the sheet."


class Truth:
    """An aligner for one stream whose word starts (samples on the stream's timeline) it knows: it times a clip's
    words at their true starts, a word not yet spoken in the clip at the clip's end, and, unless the clip runs to the
    audio's end, blurs every start within `blur` samples of the clip's end (moved halfway to it), as a real aligner
    may where the clip cuts speech short.
    A stream that took a blurred time would differ from the truth."""

    def __init__(self, audio: np.ndarray, starts: list[int], blur: int) -> None:
        self.audio = audio.astype(np.float32) / 32768.0
        self.words = [w.text for w in text_words(TEXT)]
        self.starts, self.blur = starts, blur
        self.calls: list[tuple[int, int, list[str]]] = []  # (clip offset, clip samples, words given)

    def locate(self, clip: np.ndarray) -> int:
        head = clip[:64]
        windows = np.lib.stride_tricks.sliding_window_view(self.audio, len(head))
        return int(np.flatnonzero((windows == head).all(axis=1))[0])

    def align(self, clip: np.ndarray, text: str) -> list[WordTime]:
        offset, n, given = self.locate(clip), len(clip), [w.text for w in text_words(text)]
        first = self.starts.index(offset) if offset else 0  # a later clip starts at its first word
        assert given == self.words[first: first + len(given)]
        self.calls.append((offset, n, given))
        starts = [min(s - offset, n) for s in self.starts[first: first + len(given)]]
        if offset + n < len(self.audio):  # a clip that ends before the speech does
            starts = [s if s <= n - self.blur else (s + n) // 2 for s in starts]
        ends = [*starts[1:], n]
        return [WordTime(w, s, e) for w, s, e in zip(given, starts, ends, strict=True)]


class InlineWorker:
    """The worker's `submit`, answered at once on the event loop (or held until `answer()` when `hold`)."""

    def __init__(self, align: Callable[[np.ndarray, str], list[WordTime]], hold: bool = False) -> None:
        self.align, self.hold = align, hold
        self.jobs: list[AlignJob] = []
        self.fail: BaseException | None = None
        self.busy = False  # what behind() says
        self.expected = 0  # the streams' expect() counts, summed

    def behind(self) -> bool:
        return self.busy

    def expect(self, streams: int) -> None:
        self.expected += streams

    def submit(self, job: AlignJob) -> None:
        self.jobs.append(job)
        if not self.hold:
            self.answer(job)

    def answer(self, job: AlignJob) -> None:
        if self.fail is not None:
            job.deliver(None, self.fail)
        else:
            job.deliver(self.align(job.audio, job.text), None)


def truth_of(seed: int, seconds: float = 3.2) -> tuple[np.ndarray, list[int]]:
    """Speech-like audio and increasing word starts over it: the first after 80 ms, the last 320 ms before its end."""
    rng = np.random.default_rng(seed)
    audio = pcm(seconds, seed)
    gaps = rng.uniform(0.5, 1.5, len(text_words(TEXT)) - 1)
    span = len(audio) - int(0.4 * RATE)
    starts = int(0.08 * RATE) + np.concatenate([[0.0], np.cumsum(gaps)]) / gaps.sum() * span
    return audio, [int(s) for s in starts]


def cut(audio: np.ndarray, rng: np.random.Generator) -> list[np.ndarray]:
    """Chunks of 1-4 codec frames (80 ms each), as the engine yields them."""
    sizes = list(itertools.accumulate(int(rng.integers(1, 5)) * 1_920 for _ in range(len(audio) // 1_920 + 1)))
    return np.split(audio, [s for s in sizes if s < len(audio)])


async def ticks(n: int = 50) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


Got = list[tuple[list[WordTime], np.ndarray, int]]


async def run(stream: AlignedStream, inner: Chunks, step: asyncio.Event,
              settle: Callable[[], Awaitable[None]] = ticks) -> Got:
    """Each piece with the words taken before it (as the gateway takes them) and the inner chunks made by then,
    stepping the inner stream one chunk at a time with `settle` awaited in between (the event loop's ready work)."""
    got: Got = []

    async def consume() -> None:
        async for piece in stream:
            got.append((stream.take_words(), piece, inner.yielded))

    task = asyncio.ensure_future(consume())
    for _ in inner.chunks:
        step.set()
        await settle()
    await asyncio.wait_for(task, 120)
    return got


def check_order(got: Got) -> list[WordTime]:
    """Every word was taken before the piece that holds its start (or with it); each ends where the next starts
    or before. The words, in the order taken."""
    arrived = [(i, w) for i, (words, _, _) in enumerate(got) for w in words]
    released = list(itertools.accumulate(len(p) for _, p, _ in got))
    for i, w in arrived:
        holder = next((j for j, e in enumerate(released) if w.start < e), len(got) - 1)
        assert i <= holder, f"{w} came after the piece that holds its start"
    taken = [w for _, w in arrived]
    assert all(a.end <= b.start for a, b in itertools.pairwise(taken))
    return taken


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
async def test_pieces_go_out_while_the_rest_is_made_with_the_true_times(seed: int) -> None:
    audio, starts = truth_of(seed)
    rng = np.random.default_rng(seed + 10)
    margin = int(rng.integers(3, 7)) * 1_920  # 240-560 ms
    truth = Truth(audio, starts, blur=margin)
    step = asyncio.Event()
    inner = Chunks(TEXT, cut(audio, rng), step)
    stream = AlignedStream(inner, InlineWorker(truth.align), group_samples=12_000,  # type: ignore[arg-type]
                           margin_samples=margin, ahead_samples=len(audio))  # a piece every group
    got = await run(stream, inner, step)

    assert np.array_equal(np.concatenate([p for _, p, _ in got]), audio)  # every sample once, in order
    taken = check_order(got)
    words = [w.text for w in text_words(TEXT)]
    ends = [*starts[1:], len(audio)]
    assert taken == [WordTime(w, s, e) for w, s, e in zip(words, starts, ends, strict=True)]  # no blurred time
    assert got[0][2] < len(inner.chunks) // 2  # the first piece went out before half the audio was made
    assert got[0][0][-1].end >= FIRST_PIECE_SAMPLES  # and holds enough to cover the next one's making
    assert len(truth.calls) > 2 and truth.calls[-1][2] == words[len(words) - len(truth.calls[-1][2]):]
    for offset, n, given in truth.calls[:-1]:  # a partial clip carries only the words it could hold
        assert len(given) <= 2 + n * MAX_WORDS_PER_SECOND // RATE
        assert offset in (0, *starts)


@pytest.mark.parametrize("pace,bound_s", [(0.5, 0.7), (0.1, 0.4)])  # 2x real time: 2 x (0.25 + 0.1); 10x: the floor
async def test_a_slowly_made_stream_waits_for_a_first_piece_that_covers_the_next(pace: float, bound_s: float) -> None:
    """The first piece holds FIRST_PIECE_COVER x what the next takes (a group at the stream's pace so far, plus the
    last call's time), at least FIRST_PIECE_SAMPLES: made at 2x real time with 0.1-s calls, 0.7 s of audio."""
    audio, starts = truth_of(14)
    truth = Truth(audio, starts, blur=1_920)
    now = [0.0]

    def slow_call(clip: np.ndarray, text: str) -> list[WordTime]:
        now[0] += 0.1
        return truth.align(clip, text)

    step = asyncio.Event()
    inner = Chunks(TEXT, cut(audio, np.random.default_rng(14)), step)
    stream = AlignedStream(inner, InlineWorker(slow_call), group_samples=12_000,  # type: ignore[arg-type]
                           margin_samples=1_920, ahead_samples=len(audio), clock=lambda: now[0])
    sizes = iter([len(c) for c in inner.chunks])

    async def made() -> None:  # the clock runs at the stream's pace as each chunk is made
        now[0] += next(sizes, 0) / RATE * pace
        await ticks()

    got = await run(stream, inner, step, made)
    assert np.array_equal(np.concatenate([p for _, p, _ in got]), audio)
    first = got[0][0]
    assert got[0][2] < len(inner.chunks) and first[-1].end >= bound_s * RATE, (first[-1].end / RATE, got[0][2])
    check_order(got)


async def test_while_the_listener_is_ahead_the_audio_gathers_for_the_last_call() -> None:
    """After the first piece, a piece is aligned only while the listener's lead (the audio released, less the time
    since the first release: here a frozen clock) is under `ahead`; the rest waits for the stream's end."""
    audio, starts = truth_of(12)
    truth = Truth(audio, starts, blur=2_400)
    step = asyncio.Event()
    inner = Chunks(TEXT, cut(audio, np.random.default_rng(12)), step)
    stream = AlignedStream(inner, InlineWorker(truth.align), group_samples=6_000,  # type: ignore[arg-type]
                           margin_samples=2_400, ahead_samples=18_000, clock=lambda: 0.0)
    got = await run(stream, inner, step)
    assert np.array_equal(np.concatenate([p for _, p, _ in got]), audio)
    offsets = [offset for offset, _, _ in truth.calls]  # a clip starts where the audio released so far ends
    assert offsets[-1] >= 18_000 and all(o < 18_000 for o in offsets[:-1]), offsets  # then only the last call
    assert len(offsets) >= 3  # pieces before it


async def test_a_listener_running_short_gets_the_next_piece_without_new_audio() -> None:
    """The lead shrinks with time: a piece deferred while the listener was ahead is aligned once it runs short,
    even when no more audio comes (the inner stream is stalled)."""
    audio, starts = truth_of(13)
    truth = Truth(audio, starts, blur=1_920)
    step = asyncio.Event()
    inner = Chunks(TEXT, cut(audio, np.random.default_rng(13)), step)
    now = [0.0]
    stream = AlignedStream(inner, InlineWorker(truth.align), group_samples=6_000,  # type: ignore[arg-type]
                           margin_samples=1_920, ahead_samples=12_000, clock=lambda: now[0])
    got: Got = []

    async def consume() -> None:
        async for piece in stream:
            got.append((stream.take_words(), piece, inner.yielded))

    task = asyncio.ensure_future(consume())
    while not got or inner.yielded < len(inner.chunks) * 2 // 3:  # a first piece out, two thirds of the audio made
        step.set()
        await ticks()
    calls = len(truth.calls)
    await ticks()
    assert len(truth.calls) == calls  # the listener is ahead: nothing aligned without news
    now[0] = 100.0  # long after the first release: the lead is gone; the deferred wait ends on its own
    for _ in range(200):
        if len(truth.calls) > calls:
            break
        await asyncio.sleep(0.05)
    assert len(truth.calls) > calls and not inner.cancelled.is_set()
    while not task.done():
        step.set()
        await ticks()
    check_order(got)


async def test_whole_mode_and_a_blind_aligner_release_everything_at_the_end() -> None:
    audio, starts = truth_of(4)
    truth = Truth(audio, starts, blur=0)
    whole = truth.align(audio.astype(np.float32) / 32768.0, TEXT)

    def blind(clip: np.ndarray, text: str) -> list[WordTime]:  # every word at the clip's end, the final one true
        return whole if len(clip) == len(audio) else [WordTime(w.text, len(clip), len(clip)) for w in text_words(text)]

    for group, align in ((0, truth.align), (12_000, blind)):
        step = asyncio.Event()
        inner = Chunks(TEXT, cut(audio, np.random.default_rng(5)), step)
        worker = InlineWorker(align)
        stream = AlignedStream(inner, worker, group_samples=group, margin_samples=4 * 1_920)  # type: ignore[arg-type]
        got = await run(stream, inner, step)
        assert all(made == len(inner.chunks) for _, _, made in got)  # nothing before the end
        assert [len(p) for _, p, _ in got] == [len(c) for c in inner.chunks]  # the chunks as made
        assert got[0][0] == whole  # the whole clip's words, before the first chunk
        assert (len(worker.jobs) == 1) if group == 0 else (len(worker.jobs) > 2)
        assert worker.jobs[-1].text == TEXT and len(worker.jobs[-1].audio) == len(audio)


async def test_a_text_still_open_is_not_aligned_in_pieces() -> None:
    audio, starts = truth_of(6)
    truth = Truth(audio, starts, blur=0)
    step = asyncio.Event()
    head = TEXT[:20]
    inner = Chunks(head, cut(audio, np.random.default_rng(6)), step, text_open=True)
    stream = AlignedStream(inner, InlineWorker(truth.align), group_samples=12_000,  # type: ignore[arg-type]
                           margin_samples=1_920)
    stream.append_text(TEXT[20:])
    task = asyncio.ensure_future(run(stream, inner, step))
    while inner.yielded < len(inner.chunks) // 2:
        await asyncio.sleep(0)
    assert truth.calls == []  # half the audio made, the text not yet closed
    stream.end_text()
    got = await task
    assert got[0][2] < len(inner.chunks)  # pieces once it closed
    check_order(got)


@pytest.mark.parametrize(("hold", "group"), [(False, 0), (False, 12_000), (True, 12_000)])
async def test_a_not_held_stream_counts_itself_while_it_may_bring_a_clip(hold: bool, group: int) -> None:
    """AlignerWorker.expect (its not-held calls gather only while some stream may still bring a clip): a not-held
    stream counts itself while it makes audio with no job out, never at a submit of its own, again after a partial
    answer, and not once it ends; a held stream never counts (its clips start their calls at once)."""
    audio, starts = truth_of(4)
    truth = Truth(audio, starts, blur=4 * 1_920)
    worker = InlineWorker(truth.align)
    at_submit: list[int] = []
    submit = worker.submit

    def recording(job: AlignJob) -> None:
        at_submit.append(worker.expected)
        submit(job)

    worker.submit = recording  # type: ignore[method-assign]
    step = asyncio.Event()
    inner = Chunks(TEXT, cut(audio, np.random.default_rng(24)), step)
    stream = AlignedStream(inner, worker, group_samples=group, margin_samples=4 * 1_920,  # type: ignore[arg-type]
                           ahead_samples=len(audio), hold=hold)
    while_made: list[int] = []

    async def settle() -> None:
        await ticks()
        while_made.append(worker.expected)

    await run(stream, inner, step, settle)
    assert at_submit and set(at_submit) == {0} and worker.expected == 0
    if hold:
        assert set(while_made) == {0}
    else:
        assert while_made[0] == 1 and set(while_made) <= {0, 1}
        assert len(at_submit) == 1 if group == 0 else len(at_submit) > 1  # whole: one call, once made


@pytest.mark.parametrize("hold", [True, False])
async def test_a_cancel_during_a_partial_alignment_ends_the_words_with_the_audio(hold: bool) -> None:
    """Held, nothing was released: no word, no audio. Not held, the audio made so far was out; still no word."""
    audio, starts = truth_of(7)
    truth = Truth(audio, starts, blur=0)
    worker = InlineWorker(truth.align, hold=True)
    step = asyncio.Event()
    inner = Chunks(TEXT, cut(audio, np.random.default_rng(7)), step)
    stream = AlignedStream(inner, worker, group_samples=12_000, margin_samples=1_920,  # type: ignore[arg-type]
                           hold=hold)
    task = asyncio.ensure_future(run(stream, inner, step))
    while not worker.jobs:
        await asyncio.sleep(0)
    stream.cancel()
    worker.answer(worker.jobs[0])  # its answer comes after the cancel: ignored
    got = await asyncio.wait_for(task, 60)
    if hold:
        assert got == []
    else:
        assert got and all(len(p) and not words for words, p, _ in got)  # audio that was out, no word
    assert stream.take_words() == [] and worker.jobs[0].cancelled and inner.cancelled.is_set()


async def test_a_failed_partial_alignment_ends_the_stream_with_its_error() -> None:
    audio, starts = truth_of(8)
    worker = InlineWorker(Truth(audio, starts, blur=0).align)
    worker.fail = RuntimeError("boom")
    step = asyncio.Event()
    inner = Chunks(TEXT, cut(audio, np.random.default_rng(8)), step)
    stream = AlignedStream(inner, worker, group_samples=12_000, margin_samples=1_920)  # type: ignore[arg-type]
    with pytest.raises(EngineError, match="word alignment failed: RuntimeError: boom"):
        await run(stream, inner, step)
    assert len(worker.jobs) == 1


async def test_a_text_without_words_releases_its_audio_unmeasured() -> None:
    audio, _ = truth_of(9, seconds=1.0)
    worker = InlineWorker(lambda a, t: pytest.fail("nothing to measure"))
    step = asyncio.Event()
    inner = Chunks("...", cut(audio, np.random.default_rng(9)), step)
    got = await run(AlignedStream(inner, worker, group_samples=4_800, margin_samples=0), inner, step)  # type: ignore[arg-type]
    assert np.array_equal(np.concatenate([p for _, p, _ in got]), audio) and worker.jobs == []


@pytest.fixture(scope="module")
def aligner(tmp_path_factory: pytest.TempPathFactory) -> Aligner:
    return Aligner.from_pretrained(write_sharp_aligner(tmp_path_factory.mktemp("timed-aligner"), classes=20))


async def test_the_real_worker_and_aligner_keep_every_word_before_its_audio(aligner: Aligner) -> None:
    torch.manual_seed(0)
    worker = AlignerWorker(aligner)
    try:
        audio = pcm(3.0, 11)
        step = asyncio.Event()
        inner = Chunks(TEXT, cut(audio, np.random.default_rng(11)), step)
        stream = AlignedStream(inner, worker, group_samples=12_000, margin_samples=2 * 1_920)

        async def made() -> None:  # the chunk is taken (the worker thread answers in its own time)
            while step.is_set():
                await asyncio.sleep(0)

        got = await run(stream, inner, step, made)
    finally:
        worker.close()
    assert np.array_equal(np.concatenate([p for _, p, _ in got]), audio)
    taken = check_order(got)
    assert [w.word for w in taken] == [w.text for w in text_words(TEXT)]
    assert taken[-1].end == len(audio) and worker.batches >= 1


@pytest.mark.parametrize("seed", [0, 1, 2])
async def test_not_held_the_audio_goes_out_as_made_and_each_word_once_measured(seed: int) -> None:
    """`hold=False`: every chunk is yielded as soon as it is made, unchanged; the words come with the same true times
    as held, each handed over (an empty chunk) when its clip is answered, the last ones before the stream ends."""
    audio, starts = truth_of(seed)
    rng = np.random.default_rng(seed + 20)
    truth = Truth(audio, starts, blur=4 * 1_920)
    step = asyncio.Event()
    inner = Chunks(TEXT, cut(audio, rng), step)
    stream = AlignedStream(inner, InlineWorker(truth.align), group_samples=12_000,  # type: ignore[arg-type]
                           margin_samples=4 * 1_920, ahead_samples=len(audio), hold=False)
    got = await run(stream, inner, step)

    sounding = [(p, made) for _, p, made in got if len(p)]
    assert [len(p) for p, _ in sounding] == [len(c) for c in inner.chunks]  # the chunks as made, none held
    assert [made for _, made in sounding] == list(range(1, len(inner.chunks) + 1))  # each out as it came
    assert all(words for words, p, _ in got if not len(p))  # an empty chunk only hands words over
    taken = [w for words, _, _ in got for w in words]
    ends = [*starts[1:], len(audio)]
    assert taken == [WordTime(w.text, s, e) for w, s, e in zip(text_words(TEXT), starts, ends, strict=True)]
    first_words_at = next(made for words, _, made in got if words)
    assert first_words_at < len(inner.chunks)  # the first words before the audio's end: measured in pieces
    assert not len(got[-1][1]) and got[-1][0][-1].end == len(audio)  # the last words, then the end
    assert len(truth.calls) > 2



@pytest.mark.parametrize("hold", [False, True])
async def test_while_the_aligner_is_behind_a_not_held_stream_makes_one_call(hold: bool) -> None:
    """Not held, with the aligner's queue already filling its next call (`behind()`), a partial piece's words would
    come late anyway: the stream makes no partial call, and one call once the sentence is made times every word (the
    truth: the clip runs to the audio's end), its audio out as made. Held, the pieces go on (they release audio)."""
    audio, starts = truth_of(3)
    truth = Truth(audio, starts, blur=4 * 1_920)
    step = asyncio.Event()
    inner = Chunks(TEXT, cut(audio, np.random.default_rng(23)), step)
    worker = InlineWorker(truth.align)
    worker.busy = True
    stream = AlignedStream(inner, worker, group_samples=12_000,  # type: ignore[arg-type]
                           margin_samples=4 * 1_920, ahead_samples=len(audio), hold=hold)
    got = await run(stream, inner, step)
    taken = [w for words, _, _ in got for w in words]
    ends = [*starts[1:], len(audio)]
    assert taken == [WordTime(w.text, s, e) for w, s, e in zip(text_words(TEXT), starts, ends, strict=True)]
    assert np.array_equal(np.concatenate([p for _, p, _ in got]), audio)
    assert {job.hold for job in worker.jobs} == {hold}  # what the worker's gather_s goes by (held: never gathered)
    if hold:
        assert len(truth.calls) > 1
    else:
        assert truth.calls == [(0, len(audio), [w.text for w in text_words(TEXT)])]
        assert [len(p) for _, p, _ in got if len(p)] == [len(c) for c in inner.chunks]  # out as made

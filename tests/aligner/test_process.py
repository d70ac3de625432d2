"""The aligner in a child process (engine option `aligner_process`; engine/aligner/process.py): the words it
answers equal the aligner's own, call after call through a shared segment that grows, with its call's parts; a
checkpoint that does not load is one line; a dead child fails the batches after it and the worker goes on; close
ends the process and frees the segment. Tiny synthetic aligner, CPU, fp32, a real spawned process."""

from __future__ import annotations

import threading
from multiprocessing.shared_memory import SharedMemory
from pathlib import Path

import numpy as np
import pytest
import torch
from voxgate.engine.aligner import process
from voxgate.engine.aligner.align import INPUT_RATE, Aligner
from voxgate.engine.aligner.process import ChildAligner
from voxgate.engine.aligner.worker import AlignerWorker, AlignJob
from voxgate.engine.words import WordTime

from .checkpoint import write_sharp_aligner
from .test_batch import random_batch

OPTIONS = dict(max_batch=64, graphs=False, encoder_graphs=False)


@pytest.fixture(scope="module")
def timed_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Times under 20 x 80 ms: inside these clips, not clamped to their ends.
    return write_sharp_aligner(tmp_path_factory.mktemp("timed-aligner"), classes=20)


def test_the_child_answers_as_the_aligner_does_through_a_growing_segment(
        timed_ckpt: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(process, "_FIRST_SEGMENT_BYTES", 4096)  # every call below outgrows the one before
    alone = Aligner.from_pretrained(timed_ckpt)
    child = ChildAligner(str(timed_ckpt), "cpu", torch.float32, OPTIONS, AlignerWorker)
    try:
        names = []
        for seed, take in ((1, 1), (2, 3), (3, 6)):
            clips, texts = random_batch(seed, rate=INPUT_RATE)
            clips, texts = clips[:take], texts[:take]
            got = child.align_batch(clips, texts)
            assert got == alone.align_batch(clips, texts)
            assert set(child.last_parts) == set(alone.last_parts) and child.last_host_cpu > 0  # the child's call
            assert any(len({w.start for w in words}) > 1 for words in got)  # the times vary inside a clip
            names.append(child._segment.name)  # type: ignore[union-attr]
        assert len(set(names)) == 3
        assert child.align_batch([], []) == []
    finally:
        child.close()
    assert child._process.exitcode == 0 and child._segment is None
    with pytest.raises(FileNotFoundError):  # unlinked
        SharedMemory(name=names[-1])


def test_a_checkpoint_that_does_not_load_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match=r"^loading the aligner failed: \w+: .*") as caught:
        ChildAligner(str(tmp_path / "missing"), "cpu", torch.float32, OPTIONS, AlignerWorker)
    assert "\n" not in str(caught.value)


def _submit(worker: AlignerWorker, audio: np.ndarray, text: str) -> tuple[threading.Event, list]:
    done, answer = threading.Event(), []

    def deliver(words: list[WordTime] | None, error: BaseException | None) -> None:
        answer.append((words, error))
        done.set()

    worker.submit(AlignJob(audio, text, deliver))
    return done, answer


def test_the_worker_in_process_mode_measures_counts_and_survives_a_dead_child(timed_ckpt: Path) -> None:
    worker = AlignerWorker.load(str(timed_ckpt), torch.device("cpu"), torch.float32, process=True,
                                gather_s=0.05, **OPTIONS)
    try:
        assert isinstance(worker.aligner, ChildAligner) and worker.batches == 0  # the warm-up is not counted
        assert worker.gather_s == 0.05 and worker.profile is None  # gathered here; the child's calls start at once
        clips, texts = random_batch(4, rate=INPUT_RATE)
        done, answer = _submit(worker, clips[0], texts[0])
        assert done.wait(60)
        assert answer == [(Aligner.from_pretrained(timed_ckpt).align(clips[0], texts[0]), None)]
        registry = worker.metrics.registry  # type: ignore[union-attr]
        assert registry.get_sample_value("voxgate_engine_aligner_audio_seconds_total") == pytest.approx(
            len(clips[0]) / INPUT_RATE)
        assert registry.get_sample_value("voxgate_engine_aligner_part_seconds_total", {"part": "prepare"}) > 0
        assert registry.get_sample_value("voxgate_engine_aligner_host_cpu_seconds_total") > 0  # the child's
        assert worker.batches == 1
        worker.aligner._process.kill()  # e.g. killed for memory
        worker.aligner._process.join(10)
        for _ in range(2):  # every batch after it fails, with the reason, and the worker goes on
            done, answer = _submit(worker, clips[1], texts[1])
            assert done.wait(60)
            (words, error), = answer
            assert words is None and str(error) == "the aligner process exited (code -9)"
    finally:
        worker.close()
    assert not worker._thread.is_alive()

"""engine option aligner_turns: the aligner's captured encoder and decoder run in the engine loop's turns
(engine/gpu_turns.py), three a call, and give the same unit times as without them. Tiny synthetic aligner, fp32;
on the CPU the graphs' steps run eagerly, on CUDA they replay."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch
from voxgate.engine.aligner.align import Aligner
from voxgate.engine.gpu_turns import GpuTurns

from .test_batch import random_batch


def turns_loop(turns: GpuTurns, stop: threading.Event, device: torch.device) -> threading.Thread:
    """A stand-in for the engine loop's thread: takes turns between 'steps' (on CUDA, kernels on its own stream)."""
    def run() -> None:
        turns.open()
        x = torch.ones(64, 64, device=device)
        while not stop.is_set():
            turns.run_pending()
            if device.type == "cuda":
                x = x @ x / 64  # a step's kernels on the loop's stream, before and after each turn
        turns.close()

    thread = threading.Thread(target=run, name="loop", daemon=True)
    thread.start()
    return thread


def check_turns(aligner: Aligner, device: torch.device, seed: int) -> None:
    clips, texts = random_batch(seed)
    want = aligner.unit_times_batch(clips, texts)
    turns = GpuTurns(device)
    aligner.use_turns(turns)
    stop = threading.Event()
    loop = turns_loop(turns, stop, device)
    try:
        got = aligner.unit_times_batch(clips, texts)
    finally:
        stop.set()
        loop.join(30)
        aligner.use_turns(None)
    assert got == want
    assert turns.taken == 3  # the encoder's convs and layers, the decoder: each in a turn


@pytest.mark.parametrize("seed", range(2))
def test_the_aligners_graphs_in_turns_give_the_same_times_on_the_cpu(aligner_ckpt: Path, seed: int) -> None:
    aligner = Aligner.from_pretrained(aligner_ckpt, decoder="packed")
    aligner.capture(progress=False, encoder_graphs=True)
    assert aligner.encoder is not None and aligner.captured is not None
    check_turns(aligner, torch.device("cpu"), seed)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_the_aligners_graphs_in_turns_give_the_same_times_on_cuda(aligner_ckpt: Path) -> None:
    """As the worker runs it (its own stream, graphs captured there), against the same graphs replayed from its
    own thread; fp32, TF32 off."""
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        aligner = Aligner.from_pretrained(aligner_ckpt, device="cuda")
        side = torch.cuda.Stream()
        with torch.inference_mode(), torch.cuda.stream(side):
            aligner.capture(progress=False, encoder_graphs=True)
            assert aligner.encoder is not None and aligner.encoder.graphs.use_graphs
            for seed in range(2):
                check_turns(aligner, torch.device("cuda"), seed)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32

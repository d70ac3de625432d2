"""The engine option `aligner_profile` (engine/aligner/call_profile.py): torch's profiler around a window of the
worker's calls, the aligner thread's operations told apart from the rest. Tiny synthetic aligner, CPU, fp32."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from voxgate.engine.aligner.align import Aligner
from voxgate.engine.aligner.call_profile import ProfileWindow
from voxgate.engine.aligner.worker import AlignerWorker, AlignJob
from voxgate.engine.qwen3tts.options import Qwen3TTSOptions

from .checkpoint import write_sharp_aligner
from .sources import pcm


@pytest.mark.parametrize("spec,want", [(None, None), ("", None),
                                       ("/tmp/a/p.md:3:2", ProfileWindow(Path("/tmp/a/p.md"), 3, 2)),
                                       ("C:/x.md:0:1", ProfileWindow(Path("C:/x.md"), 0, 1))])
def test_a_window_parses(spec: str | None, want: ProfileWindow | None) -> None:
    assert ProfileWindow.parse(spec) == want


@pytest.mark.parametrize("spec", ["p.md", "p.md:1", ":1:2", "p.md:x:2", "p.md:1:0", "p.md:-1:2"])
def test_a_bad_window_is_refused_before_anything_loads(spec: str) -> None:
    with pytest.raises(ValueError, match="aligner_profile must be PATH:FIRST:COUNT"):
        Qwen3TTSOptions(aligner_profile=spec)


def test_the_window_profiles_its_calls_and_names_the_aligners_operations(tmp_path: Path) -> None:
    aligner = Aligner.from_pretrained(write_sharp_aligner(tmp_path / "aligner", classes=20))
    out = tmp_path / "profile" / "calls.md"
    worker = AlignerWorker(aligner, profile=f"{out}:1:2")
    try:
        for i in range(4):  # one call each: each waits for the last one's words
            done = threading.Event()
            worker.submit(AlignJob(pcm(1.0, i).astype(np.float32) / 32768.0, "Hello there.",
                                   lambda words, error, done=done: done.set()))
            assert done.wait(60)
            assert out.exists() == (i >= 2), i  # written once the window's last call (1 + 2 - 1) is over
    finally:
        worker.close()
    text = out.read_text()
    assert text.startswith("# The aligner's calls 1-2 under torch's profiler") and "2 calls" in text
    aligners = [line for line in text.splitlines() if line.startswith("| ") and "| yes |" in line]
    assert any("`aten::addmm`" in line for line in aligners), text  # the network's, on the aligner's thread
    assert worker.profile is not None and worker.profile.done


def test_the_table_puts_each_runtime_call_under_its_outermost_operation() -> None:
    """The second table: a CUDA runtime call made inside an operation (a wait inside the STFT) counts under the
    outermost one; one under no operation (a graph's replay, or another thread's call filed under the aligner's id)
    under NO_OPERATION; calls under another thread id are not the aligner's."""
    from types import SimpleNamespace

    from voxgate.engine.aligner.call_profile import MARKER, NO_OPERATION, CallProfile

    def event(name: str, us: float, parent: SimpleNamespace | None = None, thread: int = 2) -> SimpleNamespace:
        return SimpleNamespace(name=name, thread=thread, self_cpu_time_total=us, cpu_parent=parent)
    stft = event("aten::stft", 100.0)
    fft = event("aten::_fft_r2c", 300.0, stft)
    events = [event(MARKER, 1.0), stft, fft, event("cudaEventSynchronize", 2000.0, fft),
              event("cudaEventSynchronize", 2000.0, fft), event("cudaGraphLaunch", 500.0),
              event("cudaLaunchKernel", 7.0, thread=5)]
    profile = CallProfile(ProfileWindow(Path("unused.md"), 0, 2), torch.device("cpu"))  # counters: CUDA only
    profile._walls = [0.01, 0.01]
    text = profile.table(events, native_tid=999, after={})
    assert "| `aten::stft` | `cudaEventSynchronize` | 1.0 | 2.000 |" in text, text
    assert f"| `{NO_OPERATION}` | `cudaGraphLaunch` | 0.5 | 0.250 |" in text
    assert "| 5 |  | `cudaLaunchKernel` |" in text and "`aten::stft` | `cudaLaunchKernel`" not in text

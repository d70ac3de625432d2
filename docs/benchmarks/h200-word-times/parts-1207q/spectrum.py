"""The aligner's features with each spectrum (engine option aligner_spectrum) on CUDA: the two within the CPU tests'
tolerance, and ms a call over calls whose clips change shape every call (as the loop's do: 1-64 clips of 0.5-3.5 s),
then the same shape every call. Run on a GPU host after gpu_loop.sh's setup:
    PYTHONPATH=/tmp/site-gw:/tmp/vx python3 docs/benchmarks/h200-word-times/parts-1207q/spectrum.py
"""

import time

import numpy as np
import torch
from voxgate.engine.aligner.features import log_mel_batch

rng = np.random.default_rng(0)


def clips(count: int, lengths: np.ndarray | None = None) -> list[torch.Tensor]:
    lengths = rng.integers(8_000, 56_000, count) if lengths is None else lengths
    return [torch.from_numpy(rng.standard_normal(int(n)).astype(np.float32) * 0.1).cuda() for n in lengths]


def ms_a_call(batches: list[list[torch.Tensor]], spectrum: str) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for b in batches:
        log_mel_batch(b, spectrum=spectrum)
        torch.cuda.synchronize()
    return 1000 * (time.perf_counter() - t0) / len(batches)


check = clips(17)
a, _ = log_mel_batch(check, spectrum="fft")
b, _ = log_mel_batch(check, spectrum="matmul")
print(f"{torch.cuda.get_device_name()}: fft against matmul, largest difference {(a - b).abs().max().item():.2e}")
for spectrum in ("fft", "matmul"):  # each its own fresh shapes (a shape fft has seen has its plan cached)
    fresh = [clips(int(rng.integers(1, 65))) for _ in range(30)]
    same = [clips(17, np.full(17, 40_000 + i)) for i in range(1)] * 30
    ms_a_call(same[:2], spectrum)
    plans = torch.backends.cuda.cufft_plan_cache.size
    fresh_ms = ms_a_call(fresh, spectrum)
    made = torch.backends.cuda.cufft_plan_cache.size - plans
    print(f"{spectrum}: {fresh_ms:.2f} ms a call, a new shape every call ({made} cuFFT plans made in 30 calls); "
          f"{ms_a_call(same, spectrum):.2f} ms, the same 17 clips every call")

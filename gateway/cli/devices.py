"""Which GPU a `voxgate serve` process runs on: `--device cuda:N` narrows the process to that one GPU, and
`--gpus all` lists the GPUs the supervisor starts one process for. No torch here: the CLI decides before any
CUDA library is loaded, which is what makes narrowing through CUDA_VISIBLE_DEVICES work."""

from __future__ import annotations

import os
import shutil
import subprocess

from voxgate.gateway.config import CUDA_INDEX, check_device

__all__ = ["check_device", "narrow_to", "parse_gpus", "visible_gpus"]


def visible_gpus(environ: dict[str, str] | None = None) -> list[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES entries (indices or UUIDs), in CUDA's order:
    CUDA_VISIBLE_DEVICES when set, else what `nvidia-smi` lists; [] without a GPU."""
    environ = os.environ if environ is None else environ
    listed = environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [entry.strip() for entry in listed.split(",") if entry.strip()]
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run([smi, "--query-gpu=index", "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]


def parse_gpus(value: str, environ: dict[str, str] | None = None) -> list[int]:
    """`--gpus`: `all` (every visible GPU) or a comma list of CUDA indices, e.g. `0,1`."""
    if value == "all":
        count = len(visible_gpus(environ))
        if count == 0:
            raise ValueError("--gpus all: no GPU is visible (CUDA_VISIBLE_DEVICES is empty or nvidia-smi lists "
                             "none); name them, e.g. --gpus 0,1")
        return list(range(count))
    try:
        indices = [int(part) for part in value.split(",")]
    except ValueError:
        raise ValueError(f"--gpus takes `all` or indices such as 0,1, not {value!r}") from None
    if not indices or min(indices) < 0 or len(set(indices)) != len(indices):
        raise ValueError(f"--gpus needs distinct non-negative indices, not {value!r}")
    return indices


def narrow_to(device: str, environ: dict[str, str]) -> str:
    """For `--device cuda:N`: make GPU N (counted among the visible ones) the only one this process sees, and
    return the device the engine is given then (`cuda:0`). One GPU per process keeps every library that falls back
    to the current device (CUDA graphs, Triton's autotuner, allocator caches) on the right one. Other devices
    (`cuda`, `cpu`) are returned as they are."""
    match = CUDA_INDEX.match(device)
    if match is None:
        return device
    index = int(match.group(1))
    listed = environ.get("CUDA_VISIBLE_DEVICES")
    if listed is None:
        environ["CUDA_VISIBLE_DEVICES"] = str(index)
        return "cuda:0"
    entries = [entry.strip() for entry in listed.split(",") if entry.strip()]
    if index >= len(entries):
        raise ValueError(f"--device {device}: CUDA_VISIBLE_DEVICES={listed!r} makes only {len(entries)} GPU(s) "
                         f"visible")
    environ["CUDA_VISIBLE_DEVICES"] = entries[index]
    return "cuda:0"

"""Static input buffers of a captured step: named fields packed in one device tensor per dtype, mirrored in pinned
host memory, so a step's inputs cross to the GPU in one copy (a PyTorch op costs ~26 us of host time on the H200
machine: one copy, not one per field). The host fills numpy views; the graph reads the device views.
"""

from __future__ import annotations

import math

import numpy as np
import torch


class PackedBuffer:
    """Fields name -> shape of one dtype: `host[name]` (numpy view, pinned memory) and `dev[name]` (tensor view)."""

    def __init__(self, fields: dict[str, tuple[int, ...]], dtype: torch.dtype, device: torch.device) -> None:
        total = max(1, sum(math.prod(shape) for shape in fields.values()))
        pin = device.type == "cuda"
        self._host = torch.zeros(total, dtype=dtype, pin_memory=pin)
        self._dev = torch.zeros(total, dtype=dtype, device=device)
        host_np = self._host.numpy()
        self.host: dict[str, np.ndarray] = {}
        self.dev: dict[str, torch.Tensor] = {}
        offset = 0
        for name, shape in fields.items():
            size = math.prod(shape)
            self.host[name] = host_np[offset: offset + size].reshape(shape)
            self.dev[name] = self._dev[offset: offset + size].view(shape)
            offset += size

    def clear(self) -> None:
        self._host.numpy().fill(0)

    def upload(self) -> None:
        """One host-to-device copy of every field (async; the host must not refill before the step has run)."""
        self._dev.copy_(self._host, non_blocking=True)


class HostCopy:
    """A pinned host mirror of a graph's static output, read back with one copy and one wait."""

    def __init__(self, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> None:
        self.tensor = torch.empty(shape, dtype=dtype, pin_memory=device.type == "cuda")
        self.array = self.tensor.numpy()
        self.device = device

    def start(self, src: torch.Tensor, rows: int) -> None:
        """Queue the copy of src[:rows] to the host; `array[:rows]` holds it once the GPU got that far."""
        self.tensor[:rows].copy_(src[:rows], non_blocking=True)

"""A CUDA stream whose kernels run on only some of the GPU's SMs (a CUDA green context), for GPU work beside the loop's
steps: the loop's latency-bound kernels keep the other SMs, whatever that work queues.

torch's green-context API changed between releases (a `create` factory with a `Stream()` method in 2.9-2.13, a
constructor later); both forms are taken, and a build without it is refused with one clear line.

A green context is never destroyed while its process runs: pinned host memory that a copy on its stream used records
an event on that stream when it is freed, and after the context is gone that record aborts the process ("CUDA
error: context is destroyed", seen at a test process's exit). Its SMs go back to the GPU when the process ends; an
engine makes one.
"""

from __future__ import annotations

import ctypes
from typing import Any

import torch


def device_sms(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def sm_limited_stream(device: torch.device, num_sms: int) -> tuple[torch.cuda.Stream, Any]:
    """A new stream on `device` limited to `num_sms` of its SMs (the driver may round up to its SM granule), and
    the green context that owns them: keep it alive as long as the stream."""
    if device.type != "cuda":
        raise ValueError(f"an SM-limited stream needs a CUDA device, not {device}")
    total = device_sms(device)
    if not 1 <= num_sms < total:
        raise ValueError(f"an SM-limited stream takes 1 to {total - 1} of this GPU's {total} SMs, not {num_sms}")
    try:
        from torch.cuda import green_contexts
    except ImportError as exc:
        raise RuntimeError(f"torch {torch.__version__} has no CUDA green contexts (an SM-limited stream)") from exc
    green = green_contexts.GreenContext
    if not getattr(green_contexts, "SUPPORTED", True):
        raise RuntimeError(f"torch {torch.__version__} was built without CUDA green contexts")
    index = device.index if device.index is not None else torch.cuda.current_device()
    create = getattr(green, "create", None)
    context = create(num_sms=num_sms, device_id=index) if create is not None else green(num_sms=num_sms,
                                                                                         device_id=index)
    if not hasattr(context, "Stream"):
        raise RuntimeError(f"torch {torch.__version__}'s green contexts make no streams of their own")
    _keep_for_the_process(context)
    return context.Stream(), context


def _keep_for_the_process(obj: object) -> None:
    """One reference nothing ever gives back (module docstring: why a green context must outlive every buffer)."""
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(obj))

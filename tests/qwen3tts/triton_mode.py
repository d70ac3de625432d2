"""Import a kernels/ module so its Triton kernels run here: compiled on CUDA, else in Triton's CPU interpreter.

Triton picks interpreter or compiler when a function is decorated, so without a GPU the module is re-imported
with TRITON_INTERPRET=1 set for the import only (other modules keep their mode). Triton itself is imported
first, in its normal mode, so its library of jit helpers (`tl.zeros`, `tl.cdiv`, ...) is compiled-mode: kernels
that must run in the interpreter too use core ops only (`tl.full`, integer arithmetic).
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def kernel_module(name: str) -> ModuleType:
    """`voxgate.kernels.<name>`, runnable on DEVICE."""
    import triton  # noqa: F401  (see the module docstring)

    full = f"voxgate.kernels.{name}"
    if torch.cuda.is_available():
        return importlib.import_module(full)
    old = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        return importlib.reload(importlib.import_module(full))
    finally:
        if old is None:
            del os.environ["TRITON_INTERPRET"]
        else:
            os.environ["TRITON_INTERPRET"] = old

"""Import a kernels/ module so its Triton kernels run here: compiled on CUDA, else in Triton's CPU interpreter.

Triton picks interpreter or compiler when a function is decorated, so without a GPU the module is re-imported
with TRITON_INTERPRET=1 set for the import only (other modules keep their mode). Triton itself is imported
first, in its normal mode, so its library of jit helpers (`tl.zeros`, `tl.cdiv`, ...) is compiled-mode: kernels
that must run in the interpreter too use core ops only (`tl.full`, integer arithmetic).
"""

from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType

import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# Modules re-imported in interpreter mode (in that order), and modules bound to them, until restore_compiled_mode.
_INTERPRETED: list[str] = []
_BOUND = ("voxgate.engine.qwen3tts.codec.codec_fused",)


def kernel_module(name: str) -> ModuleType:
    """`voxgate.kernels.<name>`, runnable on DEVICE."""
    import triton  # noqa: F401  (see the module docstring)

    full = f"voxgate.kernels.{name}"
    if torch.cuda.is_available():
        return importlib.import_module(full)
    old = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        module = importlib.reload(importlib.import_module(full))
    finally:
        if old is None:
            del os.environ["TRITON_INTERPRET"]
        else:
            os.environ["TRITON_INTERPRET"] = old
    if full not in _INTERPRETED:
        _INTERPRETED.append(full)
    return module


def restore_compiled_mode() -> None:
    """Re-import in compiled mode what kernel_module switched, and the modules bound to it (conftest calls this
    after each test module): otherwise the interpreter leaks into later tests, e.g. an engine that picks the
    fused codec wherever the kernels run would take it on the CPU, at the interpreter's speed."""
    for full in [*_INTERPRETED, *(b for b in _BOUND if _INTERPRETED and b in sys.modules)]:
        importlib.reload(sys.modules[full])
    _INTERPRETED.clear()

"""Import a kernels/ module so its Triton kernels run here: compiled on CUDA, else in Triton's CPU interpreter.

Triton picks interpreter or compiler when a function is decorated, so without a GPU the module is re-imported
with TRITON_INTERPRET=1 set for the import only (other modules keep their mode), after kernels/utils.py (the jit
helpers it calls must be interpreted too). Triton itself is imported first, in its normal mode, so its library of
jit helpers (`tl.zeros`, `tl.cdiv`, ...) is compiled-mode: kernels that must run in the interpreter too use core
ops only (`tl.full`, integer arithmetic).

Used by tests/kernel/ and by the engine tests that run the fused codec (tests/qwen3tts/test_codec_fused.py).
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterator
from types import ModuleType

import pytest
import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# Modules re-imported in interpreter mode (in that order), and modules bound to them, until restore_compiled_mode.
_INTERPRETED: list[str] = []
_BOUND = ("voxgate.engine.qwen3tts.codec.codec_fused",)
SHARED = "voxgate.kernels.utils"  # reloaded before the kernel modules, both ways


def kernel_module(name: str) -> ModuleType:
    """`voxgate.kernels.<name>`, runnable on DEVICE."""
    import triton  # noqa: F401  (see the module docstring)

    full = f"voxgate.kernels.{name}"
    module = importlib.import_module(full)  # first in compiled mode, with every module it imports
    if torch.cuda.is_available():
        return module
    old = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        for switched in (SHARED, full):  # the shared helpers first: the kernel module binds them when it runs
            if switched not in _INTERPRETED or switched == full:
                importlib.reload(importlib.import_module(switched))
            if switched not in _INTERPRETED:
                _INTERPRETED.append(switched)
    finally:
        if old is None:
            del os.environ["TRITON_INTERPRET"]
        else:
            os.environ["TRITON_INTERPRET"] = old
    return module


def restore_compiled_mode() -> None:
    """Re-import in compiled mode what kernel_module switched, and the modules bound to it (conftest calls this
    after each test module): otherwise the interpreter leaks into later tests, e.g. an engine that picks the
    fused codec wherever the kernels run would take it on the CPU, at the interpreter's speed. SHARED was switched
    first, so it is restored first."""
    for full in [*_INTERPRETED, *(b for b in _BOUND if _INTERPRETED and b in sys.modules)]:
        importlib.reload(sys.modules[full])
    _INTERPRETED.clear()


@pytest.fixture(scope="module", autouse=True)
def kernels_compiled_after_the_module() -> Iterator[None]:
    """Kernel modules a test module switched to Triton's interpreter are switched back when it ends (a conftest
    imports this fixture)."""
    yield
    restore_compiled_mode()


@pytest.fixture
def no_tf32() -> Iterator[None]:
    """True fp32 for exactness: on CUDA, cuDNN convolutions and cuBLAS matmuls default to TF32 inputs (an H200
    run failed without this). Modules that compare fp32 results take it with `pytest.mark.usefixtures`."""
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def compiled_copy(name: str) -> ModuleType:
    """A compiled-mode copy of kernels/<name>.py (kernel_module's may be the interpreter's), bound to a compiled
    copy of kernels/utils.py while it loads, for compiling its kernels for a GPU that is not here."""
    import importlib.util
    from pathlib import Path

    import voxgate.kernels

    def load(mod_name: str) -> ModuleType:
        path = Path(voxgate.kernels.__file__).parent / f"{mod_name}.py"
        spec = importlib.util.spec_from_file_location(f"voxgate.kernels._{mod_name}_compiled", path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod  # dataclasses look their module up while the class body runs
        spec.loader.exec_module(mod)
        return mod

    importlib.import_module(f"voxgate.kernels.{name}")  # its other imports in place, so that only utils is swapped
    shared = load("utils")
    old = sys.modules[SHARED]
    sys.modules[SHARED] = shared
    try:
        return load(name)
    finally:
        sys.modules[SHARED] = old


def hopper_compile(fn: object, consts: dict, desc: dict[str, str] | None = None, warps: int = 4,
                   stages: int = 4, divisible_ints: tuple[str, ...] = ()) -> object:
    """Compile a conv kernel for sm_90 here (no GPU needed) with the runtime's alignment facts: 16-byte aligned
    tensors and the sizes divisible by 16 (the conv's, and `divisible_ints`); `desc` gives the tensor descriptors'
    types."""
    import inspect
    import warnings

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    params = list(inspect.signature(fn.fn).parameters)
    f32 = {"a1_ptr", "ib1_ptr", "a2_ptr", "ib2_ptr"}
    sig = {p: "constexpr" if p in consts else (desc or {}).get(p) or ("*i64" if p == "slots_ptr" else "*fp32"
           if p in f32 else "*bf16" if p.endswith("_ptr") else "i64" if p == "st_ss" else "i32")
           for p in params}
    divisible = [p for p in params if p.endswith("_ptr")] + [
        p for p in ("M", "L", "CIN", "N", "st_ss", "st_st", *divisible_ints) if p in params]
    attrs = {(params.index(p),): [["tt.divisibility", 16]] for p in divisible}
    with warnings.catch_warnings():  # triton 3.9 announces a future default (FP fusion) on every compile
        warnings.filterwarnings("ignore", message="TRITON_DEFAULT_FP_FUSION")
        return triton.compile(ASTSource(fn, sig, consts, attrs), target=GPUTarget("cuda", 90, 32),
                              options={"num_warps": warps, "num_stages": stages})


def cubin_resources(compiled: object) -> dict[str, int] | None:
    """A kernel compiled here for a GPU target (hopper_compile, triton.compile): its registers a thread, stack
    bytes a thread (spills) and static shared memory, as cuobjdump reads them from the cubin, plus the dynamic
    shared memory Triton asks for at launch (`shared`); None where Triton carries no cuobjdump."""
    import os
    import subprocess
    import tempfile

    import triton.backends.nvidia as nvidia

    tool = os.path.join(os.path.dirname(nvidia.__file__), "bin", "cuobjdump")
    if not os.access(tool, os.X_OK):
        return None
    with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
        cubin.write(compiled.asm["cubin"])
        cubin.flush()
        out = subprocess.run([tool, "--dump-resource-usage", cubin.name], capture_output=True, text=True,
                             check=True).stdout
    line = next(line for line in out.splitlines() if "REG:" in line)
    fields = dict(item.split(":", 1) for item in line.split() if ":" in item)
    return {"registers": int(fields["REG"]), "stack": int(fields["STACK"]), "static_shared": int(fields["SHARED"]),
            "shared": int(compiled.metadata.shared)}


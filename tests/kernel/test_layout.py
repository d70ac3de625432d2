"""kernels/ keeps Liger-Kernel's shape: every kernel module has its PyTorch reference beside it, a test file here,
and a benchmark entry in kernels/bench.py; the shared Triton helpers live in kernels/utils.py only; no kernel
module imports another in a cycle. Read from the source (ast), so nothing here needs a GPU."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

KERNELS = Path(__file__).resolve().parents[2] / "kernels"
TESTS = Path(__file__).resolve().parent
# A backend of another module's op: conv_tma runs causal_conv's convs (causal_conv picks it per shape), so its
# reference is causal_conv_ref.
BACKEND_OF = {"conv_tma": "causal_conv"}
# The helpers kernels/utils.py holds once: no kernel module may define its own.
SHARED_HELPERS = {"_add", "_max", "_min", "_sum_combine", "_quick_bench", "_sin_squared", "_snake", "_epilogue",
                  "prefetch_l2", "prefetch_tiles", "_prefetch_l2", "_prefetch_tiles", "clocks", "_clocks"}


def _tree(name: str) -> ast.Module:
    return ast.parse((KERNELS / f"{name}.py").read_text())


def _is_jit(fn: ast.FunctionDef) -> bool:
    return any(isinstance(d, ast.Attribute) and d.attr == "jit" for d in fn.decorator_list)


def _functions(tree: ast.Module) -> list[ast.FunctionDef]:
    return [node for node in tree.body if isinstance(node, ast.FunctionDef)]


def _kernel_modules() -> list[str]:
    """Modules that define a Triton kernel (`@triton.jit def _<op>_kernel`)."""
    return sorted(p.stem for p in KERNELS.glob("*.py")
                  if any(_is_jit(f) and f.name.endswith("_kernel") for f in _functions(_tree(p.stem))))


def _launchers(tree: ast.Module) -> list[str]:
    """Public functions that launch a jit kernel (`_x_kernel[grid](...)`, or its autotuned `_x_tuned[grid]`)."""
    def launches(fn: ast.FunctionDef) -> bool:
        return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Subscript) and isinstance(n.func.value, ast.Name)
                   and n.func.value.id.endswith(("_kernel", "_tuned")) for n in ast.walk(fn))
    return [f.name for f in _functions(tree) if not f.name.startswith("_") and not _is_jit(f) and launches(f)]


def _imports(name: str) -> set[str]:
    """The kernels/ modules `name` imports, at module level or in functions (`from .x import`, `from . import x`)."""
    found = set()
    for node in ast.walk(_tree(name)):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            found |= {node.module} if node.module else {a.name for a in node.names}
    return found & {p.stem for p in KERNELS.glob("*.py")}


def test_the_kernel_modules_are_found() -> None:
    assert {"add_rms_norm", "causal_conv", "conv_tma", "codec_norms", "ring_attention"} <= set(_kernel_modules())
    assert "utils" not in _kernel_modules() and "bench" not in _kernel_modules()


@pytest.mark.parametrize("name", _kernel_modules())
def test_every_launcher_has_its_reference_beside_it(name: str) -> None:
    tree = _tree(name)
    launchers = _launchers(tree)
    assert launchers, f"kernels/{name}.py launches no kernel from a public function"
    if name in BACKEND_OF:
        assert f"{BACKEND_OF[name]}_ref" in {f.name for f in _functions(_tree(BACKEND_OF[name]))}
        return
    defined = {f.name for f in _functions(tree)}
    missing = [f"{fn}_ref" for fn in launchers if f"{fn}_ref" not in defined]
    assert not missing, f"kernels/{name}.py: no plain-PyTorch reference {missing} beside its launchers"


@pytest.mark.parametrize("name", _kernel_modules())
def test_every_kernel_module_has_a_test_file_against_it(name: str) -> None:
    test_file = TESTS / f"test_{name}.py"
    assert test_file.is_file(), f"tests/kernel/test_{name}.py is missing"
    assert f'kernel_module("{name}")' in test_file.read_text(), f"{test_file.name} does not load kernels/{name}.py"


@pytest.mark.parametrize("name", _kernel_modules())
def test_every_kernel_module_has_a_bench_entry(name: str) -> None:
    from voxgate.kernels.bench import ENTRIES

    assert name in {e.module for e in ENTRIES.values()}, f"kernels/bench.py has no entry for kernels/{name}.py"


def test_bench_entries_name_kernel_modules_and_need_cuda(capsys: pytest.CaptureFixture[str]) -> None:
    import torch
    from voxgate.kernels.bench import ENTRIES, main

    assert {e.module for e in ENTRIES.values()} <= set(_kernel_modules())
    assert main(["no_such_kernel"]) == 2
    if not torch.cuda.is_available():
        assert main([]) == 1
        assert capsys.readouterr().err.splitlines()[-1] == "voxgate.kernels.bench needs CUDA: no GPU here"


def test_shared_helpers_are_defined_once_in_utils() -> None:
    for path in KERNELS.glob("*.py"):
        if path.stem != "utils":
            copies = {f.name for f in _functions(_tree(path.stem))} & SHARED_HELPERS
            assert not copies, f"kernels/{path.name} defines {sorted(copies)}: import them from kernels/utils.py"
    assert _imports("utils") == set(), "kernels/utils.py imports no kernel module"


def test_no_import_cycles() -> None:
    graph = {p.stem: _imports(p.stem) for p in KERNELS.glob("*.py")}

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        return any(n == goal or (n not in seen and reaches(n, goal, seen | {n})) for n in graph.get(start, ()))

    cycles = sorted(name for name in graph if reaches(name, name, {name}))
    assert not cycles, f"kernel modules in an import cycle: {cycles}"

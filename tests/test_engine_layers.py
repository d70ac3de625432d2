"""engine/'s import graph: no cycles between its modules, and never an import of the gateway (the gateway imports
the engine, never the reverse). Read from the source with `ast`: nothing is imported."""

from __future__ import annotations

import ast
from pathlib import Path

ENGINE = Path(__file__).resolve().parents[1] / "engine"


def _modules() -> dict[str, tuple[Path, bool]]:
    """voxgate.engine... module name -> (file, is a package's __init__)."""
    out = {}
    for path in ENGINE.rglob("*.py"):
        parts = list(path.relative_to(ENGINE).with_suffix("").parts)
        init = parts[-1] == "__init__"
        out[".".join(["voxgate.engine", *(parts[:-1] if init else parts)])] = (path, init)
    return out


def _imports(name: str, path: Path, init: bool, known: dict) -> set[str]:
    """Every module `name` imports (absolute names; `from pkg import mod` counts as mod)."""
    package = name if init else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            target = ".".join([*base, *([node.module] if node.module else [])])
            found.update(f"{target}.{a.name}" if f"{target}.{a.name}" in known else target for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, init, modules) for name, (path, init) in modules.items()}


def test_engine_never_imports_the_gateway() -> None:
    upward = {name: sorted(i for i in deps if i.startswith("voxgate.gateway") or i.startswith("voxgate.client"))
              for name, deps in _graph().items()}
    assert not {name: deps for name, deps in upward.items() if deps}


def test_no_import_cycle_within_engine() -> None:
    graph = _graph()
    graph = {name: {d for d in deps if d in graph and d != name} for name, deps in graph.items()}
    cycles, state, path = [], {}, []

    def visit(name: str) -> None:
        state[name] = "open"
        path.append(name)
        for dep in sorted(graph[name]):
            if state.get(dep) == "open":
                cycles.append(" -> ".join([*path[path.index(dep):], dep]))
            elif dep not in state:
                visit(dep)
        path.pop()
        state[name] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name)
    assert not cycles

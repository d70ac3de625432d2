"""gateway/'s layers: every import between its sub-packages runs down, there is no cycle between them, and nothing in
the gateway imports torch (the server never loads CUDA; the engine does, behind `voxgate.engine`).

Units, top to bottom. A unit may import the units below it and its own modules; the root modules at the bottom
(`config`, `metrics`, `protocol`: the wire contract) import no unit. `app.py` composes the server from the layers
below it; `client.py` is a one-line re-export of the SDK's protocol client for older imports.
"""

from __future__ import annotations

import ast
from pathlib import Path

GATEWAY = Path(__file__).resolve().parent.parent / "gateway"
LAYERS = ["cli", "bench", "integrations", "client", "sdk", "app", "http", "session", "voices", "audio", "transport",
          "config", "metrics", "protocol"]
# gateway/sdk/ and gateway/integrations/ are installed as `voxgate.client` and `voxgate.integrations`
INSTALLED_AS = {"voxgate.client": "sdk", "voxgate.integrations": "integrations"}
# `voxgate bench baseline` runs the reference implementation (qwen-tts) in its own process: torch, imported there
TORCH_ALLOWED = {"bench/baseline.py"}


def unit_of_file(path: Path) -> str:
    rel = path.relative_to(GATEWAY)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def module_name(path: Path) -> str:
    rel = path.relative_to(GATEWAY).with_suffix("")
    parts = list(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
    if parts and parts[0] == "sdk":
        return ".".join(["voxgate.client", *parts[1:]])
    if parts and parts[0] == "integrations":
        return ".".join(["voxgate.integrations", *parts[1:]])
    return ".".join(["voxgate.gateway", *parts])


def imported_modules(path: Path) -> list[str]:
    """Every module a file imports (at the top, in functions, under TYPE_CHECKING), relative ones made absolute."""
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            # `from pkg import module` imports pkg.module
            found += [module] + [f"{module}.{alias.name}" for alias in node.names]
    return found


def unit_of_module(module: str) -> str | None:
    for prefix, unit in INSTALLED_AS.items():
        if module == prefix or module.startswith(prefix + "."):
            return unit
    parts = module.split(".")
    if parts[:2] != ["voxgate", "gateway"] or len(parts) < 3:
        return None
    return parts[2]


def unit_edges() -> dict[tuple[str, str], list[str]]:
    """(importer unit, imported unit) -> the files where the import is."""
    edges: dict[tuple[str, str], list[str]] = {}
    for path in sorted(GATEWAY.rglob("*.py")):
        source = unit_of_file(path)
        for module in imported_modules(path):
            target = unit_of_module(module)
            if target is not None and target != source and target in LAYERS:
                edges.setdefault((source, target), []).append(f"{path.relative_to(GATEWAY)}: {module}")
    return edges


def test_every_module_belongs_to_a_layer():
    units = {unit_of_file(path) for path in GATEWAY.rglob("*.py")} - {"__init__"}
    assert units <= set(LAYERS), f"modules outside the layers: {sorted(units - set(LAYERS))}"


def test_imports_run_down_the_layers():
    upward = [where for (source, target), places in unit_edges().items()
              if LAYERS.index(target) < LAYERS.index(source) for where in places]
    assert not upward, "imports up the layers:\n" + "\n".join(upward)


def test_no_cycle_between_units():
    graph: dict[str, set[str]] = {}
    for source, target in unit_edges():
        graph.setdefault(source, set()).add(target)

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        return any(nxt == goal or (nxt not in seen and reaches(nxt, goal, seen | {nxt}))
                   for nxt in graph.get(start, ()))

    cycles = sorted(unit for unit in graph if reaches(unit, unit, {unit}))
    assert not cycles, f"units on an import cycle: {cycles}"


def test_the_gateway_never_imports_torch():
    offenders = [f"{path.relative_to(GATEWAY)}: {module}" for path in sorted(GATEWAY.rglob("*.py"))
                 if str(path.relative_to(GATEWAY)) not in TORCH_ALLOWED
                 for module in imported_modules(path) if module == "torch" or module.startswith("torch.")]
    assert not offenders, "torch imported in the gateway:\n" + "\n".join(offenders)


def test_the_checker_resolves_imports():
    """Relative imports are made absolute (`.errors` in http/ is http's), and the installed names map back."""
    imported = imported_modules(GATEWAY / "http" / "speech.py")
    assert "voxgate.gateway.http.errors" in imported and "voxgate.gateway.session.pcm_producer" in imported
    assert unit_of_module("voxgate.gateway.session.context") == "session"
    assert unit_of_module("voxgate.client.turn") == "sdk"

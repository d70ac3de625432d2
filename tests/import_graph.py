"""The import graph as a picture (docs/import-graph.png): gateway's layers top to bottom with every import edge
between them, and the engine and kernels below; an upward edge would be drawn red. The rules are those of
tests/test_layers.py. From the repo root: `.venv/bin/python tests/import_graph.py`."""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_layers import GATEWAY, LAYERS, imported_modules, unit_edges, unit_of_file

OUT = Path(__file__).resolve().parent.parent / "docs" / "import-graph.png"


def label(unit: str) -> str:
    if (GATEWAY / unit).is_dir():
        return f"gateway/{unit}/"
    return f"gateway/{unit}.py" if (GATEWAY / f"{unit}.py").exists() else f"{unit}/"


def arrow(ax: plt.Axes, source: str, target: str, y: dict[str, int], color: str, bend: float) -> None:
    ax.annotate("", xy=(0.02, y[target] + 0.15), xytext=(0.02, y[source] - 0.15),
                arrowprops={"arrowstyle": "->", "color": color, "connectionstyle": f"arc3,rad={bend}",
                            "lw": 0.8, "alpha": 0.7})


def main() -> None:
    edges = unit_edges()
    engine_users = {unit_of_file(path) for path in GATEWAY.rglob("*.py")
                    if any(module.startswith("voxgate.engine") for module in imported_modules(path))}
    units = [*LAYERS, "engine", "kernels"]
    y = {unit: -i for i, unit in enumerate(units)}
    fig, ax = plt.subplots(figsize=(8, 11))
    for source, target in edges:
        upward = LAYERS.index(target) < LAYERS.index(source)
        arrow(ax, source, target, y, "tab:red" if upward else "tab:blue", 0.15 + 0.05 * (y[source] - y[target]))
    for user in engine_users:
        arrow(ax, user, "engine", y, "tab:green", -0.35)
    arrow(ax, "engine", "kernels", y, "tab:green", 0.0)
    for unit in units:
        ax.text(0, y[unit], label(unit), ha="center", va="center", fontsize=10,
                bbox={"boxstyle": "round", "fc": "white", "ec": "gray"})
    ax.set_xlim(-1.5, 1.5)
    ax.set_ylim(-len(units), 1)
    ax.axis("off")
    ax.set_title("voxgate imports: every edge runs down (blue: between gateway units, green: into the engine; an\n"
                 "upward import would be red). tests/test_layers.py and tests/test_engine_layers.py hold it.",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(OUT, dpi=110)
    print(f"{OUT}: {len(edges)} edges between gateway units")


if __name__ == "__main__":
    main()

"""Suite-wide marker policy: `perf` tests measure wall-clock speed, so they run only when asked for by name
(`pytest -m perf`, serially, on a quiet machine) and never gate the default run or `-m "not slow"`."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "perf" in (config.getoption("markexpr") or ""):
        return  # the caller chose (`-m perf`, `-m "perf and not gpu"`, ...)
    kept = [item for item in items if item.get_closest_marker("perf") is None]
    if len(kept) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if item.get_closest_marker("perf") is not None])
        items[:] = kept

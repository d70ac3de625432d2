"""The reliability suite: hostile, broken or slow clients against real servers, each answered as documented while
a bystander session keeps speaking without a pause over 10 ms (harness.py)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from harness import serve_process


@pytest.fixture
def serve(tmp_path: Path):
    """`serve(config_toml, *args)`: a `voxgate serve` process, stopped after the test."""
    stack = contextlib.ExitStack()
    yield lambda config="", *args: stack.enter_context(serve_process(tmp_path, config, *args))
    stack.close()

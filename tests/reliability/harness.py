"""The reliability suite's `voxgate serve` process (a real process: signals, exit codes, logs). The bystander session
is in tests/support.py, the raw socket clients in raw.py."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from support import ServeProcess
from support import serve_process as support_serve_process

__all__ = ["ServeProcess", "serve_process"]


@contextlib.contextmanager
def serve_process(tmp_path: Path, config: str = "", *args: str) -> Iterator[ServeProcess]:
    """`voxgate serve` (fake engine) as a real process with `config` as its TOML; killed at the end if still up."""
    (tmp_path / "serve.toml").write_text(config)
    with support_serve_process(tmp_path / "serve.log", *args, config=tmp_path / "serve.toml", engine="fake",
                               stop="kill") as served:
        yield served

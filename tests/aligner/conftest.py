"""A tiny synthetic aligner checkpoint, written once per session."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from .checkpoint import write_sharp_aligner


@pytest.fixture(scope="session")
def aligner_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_sharp_aligner(tmp_path_factory.mktemp("aligner"))


@pytest.fixture(scope="session")
def ref_aligner(aligner_ckpt: Path) -> Any:
    """The reference's Qwen3ForcedAligner on the same checkpoint (encoder windows as its flash-attention path)."""
    from .reference import reference_aligner

    return reference_aligner(aligner_ckpt)


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)

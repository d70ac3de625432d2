"""Fixtures of the kernel tests: a fixed seed before each test (inputs are fresh random tensors, the same every
run), kernel modules back in compiled mode after each test module, and true fp32 where a module asks for it."""

from __future__ import annotations

import pytest
import torch
from triton_mode import kernels_compiled_after_the_module, no_tf32  # noqa: F401  (fixtures: kernels, fp32)


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(42)

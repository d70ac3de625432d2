"""Fixtures for the Qwen3-TTS port: tiny synthetic checkpoints (written once per session through our writer and
loaded back through our loader) and the reference implementation built on the very same tensors."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from triton_mode import kernels_compiled_after_the_module, no_tf32  # noqa: F401  (fixtures: kernels, fp32)

from .shared import require_shared, shared_path  # noqa: F401  (re-exported for other test packages)

LIKE = {
    "cv17": "Qwen3-TTS-12Hz-1.7B-CustomVoice",
    "cv06": "Qwen3-TTS-12Hz-0.6B-CustomVoice",
    "vd17": "Qwen3-TTS-12Hz-1.7B-VoiceDesign",
    "base06": "Qwen3-TTS-12Hz-0.6B-Base",
    "base17": "Qwen3-TTS-12Hz-1.7B-Base",
}


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(42)


@pytest.fixture(scope="session")
def shared() -> Path:
    return require_shared("qwen3-tts")


@pytest.fixture(scope="session")
def tiny_ckpt(tmp_path_factory: pytest.TempPathFactory, shared: Path) -> Callable[[str], Path]:
    """kind -> directory of a tiny synthetic checkpoint (seeded per kind, written once)."""
    from voxgate.engine.qwen3tts.tools.synthetic import write_synthetic

    made: dict[str, Path] = {}

    def get(kind: str) -> Path:
        if kind not in made:
            out = tmp_path_factory.mktemp(f"tiny-{kind}")
            made[kind] = write_synthetic(LIKE[kind], out, seed=sorted(LIKE).index(kind), tiny=True,
                                         shared=shared.parent)
        return made[kind]

    return get


@pytest.fixture(scope="session")
def ours(tiny_ckpt: Callable[[str], Path]) -> Callable[[str], Any]:
    from voxgate.engine.qwen3tts.model.generate import Qwen3TTS

    cache: dict[str, Any] = {}

    def get(kind: str) -> Any:
        if kind not in cache:
            cache[kind] = Qwen3TTS.from_pretrained(tiny_ckpt(kind), dtype=torch.float32, progress=False)
        return cache[kind]

    return get


def require_reference() -> None:
    """Skip (fail under CI=true) when the reference oracle `qwen-tts` is not installed."""
    import importlib.util
    import os

    if importlib.util.find_spec("qwen_tts") is None:
        reason = "reference oracle missing: pip install --no-deps qwen-tts==0.1.1"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{reason} (CI=true requires it)", pytrace=False)
        pytest.skip(reason)


@pytest.fixture(scope="session")
def reference(tiny_ckpt: Callable[[str], Path]) -> Callable[[str], Any]:
    require_reference()
    from .reference import reference_model

    cache: dict[str, Any] = {}

    def get(kind: str) -> Any:
        if kind not in cache:
            cache[kind] = reference_model(tiny_ckpt(kind), torch.float32)
        return cache[kind]

    return get


@pytest.fixture(scope="module")
def ckpt17(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A real-shape synthetic 1.7B CustomVoice checkpoint for the `gpu` tests: $VOXGATE_GPU_CKPT if it holds one,
    else written once per module."""
    import os

    from . import gpu_bench

    env = os.environ.get("VOXGATE_GPU_CKPT")
    if env and (Path(env) / "model.safetensors").is_file():
        yield Path(env)
        return
    out = tmp_path_factory.mktemp("ck17")
    gpu_bench.write_checkpoint(out)
    yield out

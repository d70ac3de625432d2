"""H200 checks at the real 1.7B shapes (`gpu` marker; skipped without CUDA).

A real-shape synthetic checkpoint is written once (or taken from $VOXGATE_GPU_CKPT). Parity with the reference
needs `qwen-tts==0.1.1` with transformers 4.57.3.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import torch

from . import gpu_bench

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
]


def _record(name: str, result: dict[str, object]) -> None:
    if os.environ.get("VOXGATE_GPU_RESULTS"):
        (Path(os.environ["VOXGATE_GPU_RESULTS"]) / f"{name}.json").write_text(json.dumps(result, indent=2))


def test_real_shape_checkpoint_loads_with_official_inventory(ckpt17: Path) -> None:
    from safetensors import safe_open

    with safe_open(str(ckpt17 / "model.safetensors"), "pt") as f:
        assert len(list(f.keys())) == 404
    with safe_open(str(ckpt17 / "speech_tokenizer/model.safetensors"), "pt") as f:
        decoder = [k for k in f.keys() if k.startswith("decoder.")]  # noqa: SIM118
        assert len(decoder) == 271
        assert sum(math.prod(f.get_slice(k).get_shape()) for k in decoder) == 114_323_137


def test_bf16_generation(ckpt17: Path) -> None:
    res = gpu_bench.bench_ours(ckpt17, frames=64)
    _record("test_bf16_generation", res)
    assert res["frames"] == 64 and res["finite"]


def test_fp32_parity_at_real_shapes(ckpt17: Path) -> None:
    from .reference import install_stubs

    install_stubs()  # qwen_tts imports librosa & co. at package import
    pytest.importorskip("qwen_tts")
    res = gpu_bench.parity_fp32(ckpt17, frames=64)
    _record("test_fp32_parity", res)
    assert res["text_up_front"]["codes_equal"] and res["text_per_frame"]["codes_equal"], res
    codec = res["codec"]
    assert codec["max_abs_err"] <= 1e-5 * codec["scale"], codec

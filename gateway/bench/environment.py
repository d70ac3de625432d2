"""What every number must state (shared/design/benchmarks.md): command, commit, GPU, host, and the model's setup."""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def _run(cmd: list[str], cwd: Path | None = None) -> str | None:
    try:
        out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=20, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.rstrip()  # rstrip: porcelain lines start with a meaningful space


def commit() -> dict[str, Any]:
    sha = _run(["git", "rev-parse", "HEAD"], REPO)
    status = _run(["git", "status", "--porcelain", "--untracked-files=no"], REPO)
    if sha is None and os.environ.get("VOXGATE_COMMIT"):  # a copy of the tree without .git (the GPU machine)
        return {"sha": os.environ["VOXGATE_COMMIT"], "dirty": None, "source": "VOXGATE_COMMIT"}
    paths = [line[3:] for line in (status or "").splitlines()]
    return {"sha": sha, "dirty": bool(paths) if status is not None else None, "dirty_paths": paths[:50]}


def gpus() -> list[dict[str, str]]:
    """GPUs from nvidia-smi (no torch import); empty on a machine without one."""
    if not shutil.which("nvidia-smi"):
        return []
    out = _run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version,clocks.max.sm", "--format=csv,noheader"])
    rows = []
    for line in (out or "").splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 4:
            rows.append(dict(zip(("name", "memory", "driver", "max_sm_clock"), parts, strict=True)))
    return rows


def describe() -> dict[str, Any]:
    """`command` starts as what was typed (`argv`); reports replace it with the full reproducing command."""
    argv = ["voxgate", *sys.argv[1:]] if sys.argv and sys.argv[0].endswith("voxgate") else sys.argv
    return {
        "command": shlex.join(argv),
        "argv": shlex.join(argv),
        "cwd": os.getcwd(),
        "created_utc": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commit": commit(),
        "gpus": gpus(),
        "host": {
            "hostname": platform.node(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
    }


def checkpoint_shapes(model_dir: str | Path) -> dict[str, Any]:
    """Model shapes from a Qwen3-TTS checkpoint's config.json (talker, code predictor, speech tokenizer)."""
    path = Path(model_dir)
    keys = (
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "intermediate_size",
        "vocab_size",
        "num_code_groups",
        "torch_dtype",
        "dtype",
    )
    out: dict[str, Any] = {"dir": str(path)}
    try:
        cfg = json.loads((path / "config.json").read_text())
    except (OSError, ValueError) as exc:
        return out | {"error": f"config.json: {exc}"}
    for key in ("tts_model_type", "tts_model_size", "tokenizer_type", "torch_dtype", "dtype"):
        if key in cfg:
            out[key] = cfg[key]
    talker = cfg.get("talker_config") or {}
    out["talker"] = {k: talker[k] for k in keys if k in talker}
    predictor = talker.get("code_predictor_config") or {}
    out["code_predictor"] = {k: predictor[k] for k in keys if k in predictor}
    try:
        codec = json.loads((path / "speech_tokenizer" / "config.json").read_text())
        out["codec"] = {k: v for k, v in codec.items() if isinstance(v, int | float | str) and not k.startswith("_")}
    except (OSError, ValueError):
        pass
    return out

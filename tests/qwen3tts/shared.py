"""Where the shared data lives (design docs, real Qwen3-TTS configs and tokenizer files).

`$VOXGATE_SHARED`, else `<repo>/../shared`. Tests that need it skip with a reason when it is absent, except under
CI=true, where its absence is a failure (CI must never silently skip the parity suite).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def shared_path() -> Path:
    env = os.environ.get("VOXGATE_SHARED")
    return Path(env) if env else REPO.parent / "shared"


def require_shared(*parts: str) -> Path:
    """The shared path (joined with parts), or skip / fail (CI) naming what is missing."""
    path = shared_path().joinpath(*parts)
    if not path.exists():
        reason = f"shared data not found at {path} (set VOXGATE_SHARED)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{reason}; CI=true requires it", pytrace=False)
        pytest.skip(reason)
    return path

"""Benchmark texts and the synthetic-weight length rule (shared/workloads/README.md).

A synthetic checkpoint never emits its end token, so each request carries a frame budget from its text:
`frames = round(12.5 * 0.37 * words)`, sent as the request's `max_audio_ms` (one codec frame is 80 ms).
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from pathlib import Path

FRAMES_PER_S = 12.5
SECONDS_PER_WORD = 0.37
LENGTH_RULE = "frames = round(12.5 * 0.37 * words); max_audio_ms = frames * 80"

FILES = {"sentences": "harvard-sentences.txt", "passages": "harvard-passages.txt"}
_HERE = Path(__file__).resolve().parent


def frame_budget(text: str) -> int:
    """Codec frames for `text` under the length rule (at least one)."""
    return max(1, round(FRAMES_PER_S * SECONDS_PER_WORD * len(text.split())))


def budget_ms(text: str) -> int:
    return frame_budget(text) * 1000 * 2 // 25  # 80 ms per frame, exact in integers


def workload_dirs() -> list[Path]:
    """Where workload files are looked for, first match wins: $VOXGATE_WORKLOADS, the shared folder beside or
    inside the checkout, then the copy shipped with this package (the shared folder does not travel everywhere)."""
    dirs = []
    if env := os.environ.get("VOXGATE_WORKLOADS"):
        dirs.append(Path(env))
    repo = _HERE.parent.parent
    dirs += [repo.parent / "shared" / "workloads", repo / "shared" / "workloads", _HERE / "workloads"]
    return dirs


def resolve(name_or_path: str) -> Path:
    """A workload by name (`sentences`, `passages`) or by path to a one-text-per-line file."""
    if name_or_path not in FILES:
        path = Path(name_or_path)
        if not path.is_file():
            raise FileNotFoundError(f"workload {name_or_path!r}: neither a name in {sorted(FILES)} nor a file")
        return path
    for d in workload_dirs():
        if (d / FILES[name_or_path]).is_file():
            return d / FILES[name_or_path]
    raise FileNotFoundError(f"{FILES[name_or_path]} not found in {[str(d) for d in workload_dirs()]}")


@dataclass(slots=True)
class Workload:
    """Texts in a seeded order; `length_rule` says whether each request carries the frame budget."""

    name: str
    path: str
    texts: list[str]
    length_rule: bool = True

    @classmethod
    def load(cls, name_or_path: str, length_rule: bool = True) -> Workload:
        path = resolve(name_or_path)
        texts = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        if not texts:
            raise ValueError(f"workload {path} has no texts")
        name = name_or_path if name_or_path in FILES else path.stem
        return cls(name=name, path=str(path), texts=texts, length_rule=length_rule)

    def order(self, seed: int) -> list[int]:
        """A seeded permutation of text indices; requests walk it cyclically."""
        idx = list(range(len(self.texts)))
        random.Random(seed).shuffle(idx)
        return idx

    def max_audio_ms(self, index: int) -> int | None:
        return budget_ms(self.texts[index]) if self.length_rule else None

    def describe(self) -> dict[str, object]:
        words = [len(t.split()) for t in self.texts]
        return {
            "name": self.name,
            "path": self.path,
            "texts": len(self.texts),
            "words_mean": sum(words) / len(words),
            "words_min": min(words),
            "words_max": max(words),
            "length_rule": LENGTH_RULE if self.length_rule else None,
            "budget_s_mean": (
                sum(budget_ms(t) for t in self.texts) / len(self.texts) / 1000 if self.length_rule else None
            ),
        }

"""Word timestamps of a context (session.start `timestamps: "word"`): the engine's word times, placed on the context's
audio timeline and queued before the frames that hold their audio."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from voxgate.engine.base import SAMPLE_RATE, Engine
from voxgate.engine.words import WordTime


@dataclass(slots=True)
class WordMark:
    """In a context's frame queue: these words' event goes to the writer before the frames after it."""

    words: list[dict[str, Any]]


def negotiate(requested: str, engine: Engine, hold: bool = True) -> tuple[bool, dict[str, Any]]:
    """Whether the session's contexts carry word times, and what session.started says about it (`hold`: whether
    audio waits for its word times, session.start `timestamps_hold`; it matters only to an engine that measures
    them on the audio, `word_times_by_sentence`: the others know a word's time before its audio)."""
    if requested != "word":
        return False, {"timestamps": "none"}
    if not engine.supports_word_times:
        return False, {"timestamps": "none", "timestamps_unavailable": engine.word_times_unavailable()}
    return True, {"timestamps": "word", "timestamps_hold": hold or not engine.word_times_by_sentence}


def _ms(samples: int) -> float:
    return round(samples * 1000 / SAMPLE_RATE, 1)


def word_mark(words: list[WordTime], offset: int, budget: int) -> WordMark | None:
    """An engine stream's words on its context's timeline: `offset` is the context's audio (samples at SAMPLE_RATE)
    before the stream's first sample; words from `budget` on are never spoken, and one running past it ends there."""
    placed = [{"word": w.word, "start_ms": _ms(offset + w.start), "end_ms": _ms(min(offset + w.end, budget))}
              for w in words if offset + w.start < budget]
    return WordMark(placed) if placed else None


def timestamps_event(context_id: str, ctx: int, mark: WordMark) -> dict[str, Any]:
    return {"type": "timestamps", "context_id": context_id, "ctx": ctx, "words": mark.words}

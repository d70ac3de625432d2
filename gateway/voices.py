"""Voice names, normalised once at the edge: engines only ever receive one of their own voice ids."""

from __future__ import annotations

from collections.abc import Sequence

from voxgate.engine.base import Engine


def resolve_voice(engine: Engine, requested: str, uploaded: Sequence[str] = ()) -> str | None:
    """The engine's id for `requested`: itself if the engine lists it (or it is one of the caller's `uploaded`
    voices, POST /v1/voices), else the one id equal to it ignoring case (`Tone-A` -> `tone-a`); None if no voice (or
    more than one, differing only in case) matches."""
    ids = [v.id for v in engine.voices()] + list(uploaded)
    if requested in ids:
        return requested
    folded = requested.casefold()
    matches = [i for i in ids if i.casefold() == folded]
    return matches[0] if len(matches) == 1 else None

"""The one voice rule of every door (HTTP speech, WebSocket session.start and context.open): a requested voice,
language and instruct become what the engine understands, or one error naming the field. Engines only ever receive
one of their own voice ids (or None: their default, which may follow the language) and their own name of the
language; an engine whose instruct is the voice (VoiceDesign) only requests that carry one.

A voice is, in this order: an engine voice id or one of the caller's uploaded ids (POST /v1/voices), the one id
equal to it ignoring case, an OpenAI name (`alloy`; openai_names.py, the `voice_aliases` config). A language is a
name, ISO 639 code or BCP-47 tag (languages.py) that the engine speaks (`Engine.language_for`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from voxgate.engine.base import Engine

from .languages import LanguageError, parse_language

UPLOAD_HINT = "upload a reference recording with POST /v1/voices and name the voice id it returns"


class VoiceError(Exception):
    """A voice or language that cannot be served: an error code, a message naming the field, and the field."""

    def __init__(self, code: str, message: str, field: str) -> None:
        super().__init__(message)
        self.code, self.message, self.field = code, message, field


@dataclass(frozen=True, slots=True)
class VoiceChoice:
    voice: str | None  # an engine voice id; None: the engine's default (which may follow the language)
    language: str | None  # the engine's name of the language; None: the engine decides (auto)


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


def choose_voice(engine: Engine, voice: str | None, language: str | None, instruct: str | None = None, *,
                 uploaded: Sequence[str] = (), aliases: Mapping[str, str] | None = None,
                 fields: tuple[str, str, str] = ("voice", "language", "instruct"),
                 required: bool = True) -> VoiceChoice:
    """The engine's voice and language for a request. `aliases`: OpenAI name -> engine voice id (voice_aliases());
    `fields`: the names the client used for voice, language and instruct, for the error. `required`: a request that
    speaks now (not a session default, which a context may still complete) needs a voice the engine can default to,
    and an instruct where the instruct is the voice (VoiceDesign)."""
    voice_field, language_field, instruct_field = fields
    if required and engine.requires_instruct and not instruct:
        raise VoiceError("missing_field", f"{instruct_field}: the {engine.name} engine (VoiceDesign) needs a "
                         "description of the voice", instruct_field)
    return VoiceChoice(_voice(engine, voice, uploaded, aliases or {}, voice_field, required),
                       _language(engine, language, language_field))


def _voice(engine: Engine, requested: str | None, uploaded: Sequence[str], aliases: Mapping[str, str],
           field: str, required: bool) -> str | None:
    if requested is None:
        if required and engine.default_voice() is None:
            # A Base checkpoint: no voice of its own until one is uploaded.
            raise VoiceError("voice_required", f"{field}: the {engine.name} engine has no voice of its own; "
                             f"{UPLOAD_HINT}", field)
        return None
    found = resolve_voice(engine, requested, uploaded)
    if found is None:
        found = {k.casefold(): v for k, v in aliases.items()}.get(requested.casefold())
    if found is None:
        hint = "see GET /v1/voices" if engine.voices() else f"this engine has no voice of its own; {UPLOAD_HINT}"
        raise VoiceError("voice_not_found", f"{field}: voice {requested!r} not found; {hint}", field)
    return found


def _language(engine: Engine, requested: str | None, field: str) -> str | None:
    if requested is None:
        return None
    try:
        language = parse_language(requested)
    except LanguageError as exc:
        raise VoiceError("language_not_supported", f"{field}: {exc}", field) from None
    if language is None:
        return None
    spoken = engine.language_for(language.tag, language.name)
    if spoken is None:
        raise VoiceError("language_not_supported", f"{field}: the {engine.name} engine does not speak "
                         f"{requested!r}", field)
    return spoken

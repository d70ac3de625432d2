"""Names clients bring from other APIs: OpenAI voice names (aliases of engine voices). Model ids: model_names.py.

The alias table is per engine: `voice_aliases.<engine>.<alias> = "<engine voice id>"` in the gateway config, merged
over the built-in tables below (an empty string removes a built-in alias). An alias whose voice the engine lacks is
dropped, except on an engine with one voice (a VoiceDesign or voice-clone checkpoint), where every alias names it.
"""

from __future__ import annotations

from voxgate.engine.base import Engine

OPENAI_VOICES = ("alloy", "ash", "ballad", "coral", "echo", "fable", "nova", "onyx", "sage", "shimmer", "verse",
                 "marin", "cedar")

# espeak-ng ships male voices only: OpenAI's British-sounding narrators get RP English, the rest US English.
# Qwen3-TTS CustomVoice: `alloy` (OpenAI's default) -> Ryan, the English default speaker; other female OpenAI
# voices -> Vivian / Serena, male ones -> Ryan / Aiden (its native English speakers). Test tones: two voices.
DEFAULT_VOICE_ALIASES: dict[str, dict[str, str]] = {
    "espeak": {**dict.fromkeys(OPENAI_VOICES, "en-us"), "fable": "en-gb-x-rp", "ballad": "en-gb-x-rp"},
    "qwen3tts": {"alloy": "ryan", "ash": "aiden", "ballad": "aiden", "coral": "vivian", "echo": "ryan",
                 "fable": "ryan", "nova": "vivian", "onyx": "ryan", "sage": "serena", "shimmer": "vivian",
                 "verse": "aiden", "marin": "serena", "cedar": "ryan"},
    "fake": {name: ("tone-a" if i % 2 == 0 else "tone-b") for i, name in enumerate(OPENAI_VOICES)},
}


def voice_aliases(engine: Engine, configured: dict[str, dict[str, str]]) -> dict[str, str]:
    """alias -> engine voice id, for the aliases this engine can serve."""
    table = {**DEFAULT_VOICE_ALIASES.get(engine.name, {}), **configured.get(engine.name, {})}
    ids = [v.id for v in engine.voices()]
    if len(ids) == 1:
        return {alias: ids[0] for alias, target in table.items() if target or alias in OPENAI_VOICES}
    return {alias: target for alias, target in table.items() if target in ids}


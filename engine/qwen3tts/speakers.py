"""CustomVoice's speakers and languages: each speaker's native language, the speaker a language gets by default,
and the language a text's script shows when the request says `auto`. Plain data and pure functions: the engine
(engine.py) asks them with the speakers its checkpoint has."""

from __future__ import annotations

ISO_LANGUAGES = {"zh": "chinese", "en": "english", "de": "german", "it": "italian", "pt": "portuguese",
                 "es": "spanish", "ja": "japanese", "ko": "korean", "fr": "french", "ru": "russian"}
NATIVE = {"vivian": "zh", "serena": "zh", "uncle_fu": "zh", "dylan": "zh", "eric": "zh", "ryan": "en",
          "aiden": "en", "ono_anna": "ja", "sohee": "ko"}
PREFERRED = {"en": "ryan", "zh": "vivian", "ja": "ono_anna", "ko": "sohee"}  # the default speaker per language


def default_speaker(ids: list[str]) -> str | None:
    """The English speaker (Ryan, else Aiden), else the first one."""
    english = [i for i in ids if NATIVE.get(i) == "en"]
    if PREFERRED["en"] in ids:
        return PREFERRED["en"]
    return english[0] if english else (ids[0] if ids else None)


def script_language(text: str) -> str:
    """The ISO code a text's script shows: kana Japanese, hangul Korean, other CJK Chinese, else English."""
    if any("\u3040" <= ch <= "\u30ff" for ch in text):
        return "ja"
    if any("\uac00" <= ch <= "\ud7af" for ch in text):
        return "ko"
    if any("\u4e00" <= ch <= "\u9fff" for ch in text):
        return "zh"
    return "en"


def native_speaker(ids: list[str], text: str, language: str) -> str | None:
    """A native speaker of `language` (Qwen3-TTS's English name, or `auto`: read from the script) among `ids`;
    languages without one get the English speaker."""
    code = script_language(text) if language == "auto" else \
        {name: iso for iso, name in ISO_LANGUAGES.items()}.get(language, "en")
    if code not in PREFERRED:
        code = "en"
    native = [i for i in ids if NATIVE.get(i) == code]
    return PREFERRED[code] if PREFERRED[code] in ids else (native[0] if native else default_speaker(ids))

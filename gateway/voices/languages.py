"""Languages as clients name them: English names ("English"), ISO 639-1 and 639-3 codes (`en`, `eng`) and BCP-47
tags (`en-US`, `zh-Hans`, `pt_BR`), read into one `Language`: a lower-case tag whose first subtag is the shortest
ISO code (`eng-US` -> `en-us`, `cmn` -> `zh`) and the language's English name where the table below knows it.
Each engine then says what it calls that language (`Engine.language_for`): an espeak voice, a Qwen3-TTS name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# (English name, ISO 639-1 code or "" where none, other codes: ISO 639-3 / 639-2 bibliographic, macrolanguage
# members clients send for it). Qwen3-TTS's ten languages and espeak's most used ones; a code missing here is still
# read as a tag (`haw`), and the engine decides whether it speaks it.
_TABLE = (
    ("english", "en", "eng"), ("chinese", "zh", "zho chi cmn mandarin"), ("german", "de", "deu ger"),
    ("italian", "it", "ita"), ("portuguese", "pt", "por"), ("spanish", "es", "spa"), ("japanese", "ja", "jpn"),
    ("korean", "ko", "kor"), ("french", "fr", "fra fre"), ("russian", "ru", "rus"), ("arabic", "ar", "ara"),
    ("dutch", "nl", "nld dut"), ("polish", "pl", "pol"), ("turkish", "tr", "tur"), ("swedish", "sv", "swe"),
    ("hindi", "hi", "hin"), ("vietnamese", "vi", "vie"), ("ukrainian", "uk", "ukr"), ("czech", "cs", "ces cze"),
    ("greek", "el", "ell gre"), ("finnish", "fi", "fin"), ("danish", "da", "dan"), ("hebrew", "he", "heb"),
    ("indonesian", "id", "ind"), ("thai", "th", "tha"), ("hungarian", "hu", "hun"), ("romanian", "ro", "ron rum"),
    ("norwegian", "nb", "nob nor no"), ("catalan", "ca", "cat"), ("persian", "fa", "fas per"),
    ("cantonese", "", "yue"),
)
_NAMES = {name: (iso1 or codes.split()[0]) for name, iso1, codes in _TABLE}
_CODES = {code: (iso1 or codes.split()[0]) for _, iso1, codes in _TABLE for code in (iso1, *codes.split()) if code}
_NAME_OF = {code: name for name, code in _NAMES.items()}
_TAG = re.compile(r"[a-z]{2,3}(-[a-z0-9]{1,8})*")

AUTO = ("", "auto")  # the engine decides (qwen3tts reads the script; espeak speaks its default voice)


class LanguageError(ValueError):
    """Not a language name, ISO code or BCP-47 tag."""


@dataclass(frozen=True, slots=True)
class Language:
    tag: str  # lower case, shortest primary code: "en-us", "zh-hans", "pt-br", "haw"
    name: str  # "english"; "" for a code the table does not know

    @property
    def code(self) -> str:
        """The primary subtag: "en" for "en-us"."""
        return self.tag.split("-", 1)[0]


def parse_language(text: str) -> Language | None:
    """The language `text` names; None for `auto` (or empty). LanguageError when it is none of the accepted forms."""
    folded = text.strip().casefold().replace("_", "-")
    if folded in AUTO:
        return None
    if folded in _NAMES:
        return Language(_NAMES[folded], folded)
    if folded in _CODES:  # a bare code, or a name-like code such as "mandarin"
        code = _CODES[folded]
        return Language(code, _NAME_OF.get(code, ""))
    if not _TAG.fullmatch(folded):
        raise LanguageError(f"{text!r} is not a language name (English), ISO 639 code (en, eng) or BCP-47 tag "
                            "(en-US, zh-Hans)")
    primary, _, rest = folded.partition("-")
    code = _CODES.get(primary, primary)
    return Language(f"{code}-{rest}" if rest else code, _NAME_OF.get(code, ""))

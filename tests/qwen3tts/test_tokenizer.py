"""Our tokenizer gives the reference tokenizer's ids (standard Qwen2 split regex) on a mixed corpus."""

from __future__ import annotations

from pathlib import Path

import pytest
from voxgate.engine.qwen3tts.model.prompt import instruct_text, ref_text, target_text
from voxgate.engine.qwen3tts.model.tokenizer import TextTokenizer

CORPUS = [
    "Hello, world! This is voxgate.",
    "iPhone McDonald's don't we'll I'M",  # words the Mistral-patched regex splits differently
    "你好，世界。我叫通义千问，是阿里云的开源大模型。",
    "こんにちは、世界！カタカナとひらがな。",
    "안녕하세요 세계",
    "Digits 1234567890 and 3.14159, 1,000,000; 2026-11-29 21:15 UTC",
    "Punctuation: ... --- !!! ??? «quotes» „low“ (parens) [brackets] {braces} @#$%^&*",
    "Emoji 😀👍🏽👨‍👩‍👧 🇯🇵 and symbols ™ © ½",
    "  leading spaces\n\nnewlines\r\n\ttabs   trailing  ",
    "\nstarts with a newline",
    "Ünïcödé café naïve e\u0301 (combining accent, NFC)",
    "<|im_start|>literal specials<|im_end|><tts_pad>",
]


@pytest.fixture(scope="module")
def tokenizers(shared: Path) -> tuple[TextTokenizer, object]:
    """Ours, and transformers' Qwen2TokenizerFast loaded from the same files (standard Qwen2 regex: the hub-id
    behaviour; the wrapper's local-directory load would swap in the Mistral regex, design §3)."""
    from transformers import AutoTokenizer

    d = shared / "text-tokenizer"
    return TextTokenizer(d), AutoTokenizer.from_pretrained(str(d))


@pytest.mark.slow
@pytest.mark.parametrize("text", CORPUS)
@pytest.mark.parametrize("wrap", [lambda s: s, target_text, instruct_text, ref_text],
                         ids=["raw", "target", "instruct", "ref"])
def test_ids_match_reference(tokenizers: tuple[TextTokenizer, object], text: str, wrap: object) -> None:
    ours, ref = tokenizers
    s = wrap(text)  # type: ignore[operator]
    assert ours.encode(s) == ref(s, add_special_tokens=False)["input_ids"]  # type: ignore[operator]


def test_prompt_frame(tokenizers: tuple[TextTokenizer, object]) -> None:
    ours, _ = tokenizers
    ids = ours.encode(target_text("Hi"))
    assert ids[:3] == [151644, 77091, 198] and ids[-5:] == [151645, 198, 151644, 77091, 198]
    assert ours.encode(instruct_text("x"))[:3] == [151644, 872, 198]
    assert ours.encode("<tts_pad><tts_text_bos><tts_text_eod>") == [151671, 151672, 151673]
    assert ours.decode(ours.encode("你好 😀")) == "你好 😀"

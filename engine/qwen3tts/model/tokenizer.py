"""The Qwen2 byte-level BPE text tokenizer, built from vocab.json + merges.txt + tokenizer_config.json.

No tokenizer.json ships with the checkpoints. We assemble the `tokenizers` pipeline ourselves with the standard
Qwen2 split regex (the hub-id behaviour; design §3 explains why not the Mistral-patched one the wrapper gets on
local loads): NFC normalizer -> regex split -> byte-level (no prefix space) -> BPE, plus the added tokens.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers
from tokenizers.models import BPE

QWEN2_SPLIT_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
FILES = ("vocab.json", "merges.txt", "tokenizer_config.json")


class TextTokenizer:
    """`encode(text) -> ids` with special tokens such as <|im_start|> recognised inside the text."""

    def __init__(self, model_dir: str | Path) -> None:
        d = Path(model_dir)
        missing = [f for f in FILES if not (d / f).is_file()]
        if missing:
            raise FileNotFoundError(f"{d}: missing text-tokenizer files {missing}")
        vocab = json.loads((d / "vocab.json").read_text(encoding="utf-8"))
        merges = []
        for line in (d / "merges.txt").read_text(encoding="utf-8").splitlines():
            if line and not line.startswith("#version"):
                a, b = line.split(" ")
                merges.append((a, b))
        tok = Tokenizer(BPE(vocab, merges, unk_token=None, fuse_unk=False, byte_fallback=False))
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_SPLIT_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
        tok.decoder = decoders.ByteLevel()
        config = json.loads((d / "tokenizer_config.json").read_text(encoding="utf-8"))
        added = sorted(config.get("added_tokens_decoder", {}).items(), key=lambda kv: int(kv[0]))
        tokens = [
            AddedToken(t["content"], special=t.get("special", False), lstrip=t.get("lstrip", False),
                       rstrip=t.get("rstrip", False), single_word=t.get("single_word", False),
                       normalized=t.get("normalized", False))
            for _, t in added
        ]
        tok.add_tokens(tokens)
        for idx, t in added:
            got = tok.token_to_id(t["content"])
            if got != int(idx):
                raise ValueError(f"added token {t['content']!r} got id {got}, expected {idx}")
        self._tok = tok

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids, skip_special_tokens=False)

    def token_to_id(self, token: str) -> int | None:
        return self._tok.token_to_id(token)

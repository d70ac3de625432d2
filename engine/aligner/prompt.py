"""The aligner's prompt: the clip's slots, then each unit followed by its two <timestamp> slots.

    <|audio_start|> <|audio_pad|> x N <|audio_end|> unit_1 <timestamp><timestamp> unit_2 <timestamp><timestamp> ...

N is the encoder's frame count for the clip (audio_encoder.encoder_frames). There is no chat template and no
separator between units: a unit is tokenized on its own, which is what tokenizing the whole string gives, since
the byte-level BPE never merges across special tokens.
"""

from __future__ import annotations

import functools
from pathlib import Path

from ..qwen3tts.model.tokenizer import TextTokenizer
from .config import AlignerConfig

AUDIO_START, AUDIO_END, AUDIO_PAD, TIMESTAMP = "<|audio_start|>", "<|audio_end|>", "<|audio_pad|>", "<timestamp>"
# Units tokenized once and remembered: a call of 50 clips has ~400 units, mostly words seen before, and each
# tokenizer call is ~10-30 us of host time on the aligner's thread (under the GIL, beside the engine loop).
UNIT_CACHE = 65_536


class AlignerPrompt:
    """Token ids of the prompt for a clip and its units; the special ids come from the tokenizer's files."""

    def __init__(self, tokenizer_dir: str | Path, cfg: AlignerConfig) -> None:
        self.tokenizer = TextTokenizer(tokenizer_dir)
        ids = {}
        for token in (AUDIO_START, AUDIO_END, AUDIO_PAD, TIMESTAMP):
            found = self.tokenizer.token_to_id(token)
            if found is None:
                raise ValueError(f"{tokenizer_dir}: the tokenizer has no {token} token")
            ids[token] = found
        if (ids[AUDIO_PAD], ids[TIMESTAMP]) != (cfg.audio_token_id, cfg.timestamp_token_id):
            raise ValueError(f"{tokenizer_dir}: {AUDIO_PAD}/{TIMESTAMP} are ids {ids[AUDIO_PAD]}/{ids[TIMESTAMP]}, "
                             f"the config says {cfg.audio_token_id}/{cfg.timestamp_token_id}")
        self.audio_start, self.audio_end = ids[AUDIO_START], ids[AUDIO_END]
        self.audio_pad, self.timestamp = ids[AUDIO_PAD], ids[TIMESTAMP]
        self.unit_ids = functools.lru_cache(maxsize=UNIT_CACHE)(self._unit_ids)

    def _unit_ids(self, unit: str) -> tuple[int, ...]:
        return tuple(self.tokenizer.encode(unit))

    def ids(self, units: list[str], audio_frames: int) -> list[int]:
        out = [self.audio_start, *[self.audio_pad] * audio_frames, self.audio_end]
        for unit in units:
            out += [*self.unit_ids(unit), self.timestamp, self.timestamp]
        return out

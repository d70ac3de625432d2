"""`Aligner.align(audio_24k, text) -> list[WordTime]`: word times of a known text in a 24 kHz clip.

The clip is resampled to 16 kHz (soxr), the aligner gives each of its units (engine/aligner/units.py) a start and
an end, and each word of our own split (engine.words.text_words) starts when its first unit starts. A word with no
unit (only characters the aligner drops, such as "_") starts with the next word that has one, or at the clip's
end. As WordTime says, a word ends where the next one starts, the last one at the end of the clip.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soxr
import torch

from ..words import TextWord, WordTime, text_words
from .audio_encoder import encoder_frames
from .checkpoint import load_aligner
from .config import AlignerConfig
from .features import SAMPLE_RATE, log_mel, peak_limited
from .model import Thinker
from .prompt import AlignerPrompt
from .timestamps import unit_times
from .units import Unit, split_units

INPUT_RATE = 24_000  # the TTS codec's rate, and WordTime's samples


@dataclass(frozen=True, slots=True)
class UnitTime:
    unit: Unit
    start_ms: int
    end_ms: int


class Aligner:
    def __init__(self, thinker: Thinker, prompt: AlignerPrompt) -> None:
        self.thinker, self.prompt = thinker, prompt

    @classmethod
    def from_pretrained(cls, path_or_id: str | Path, device: str | torch.device = "cpu",
                        dtype: torch.dtype = torch.float32) -> Aligner:
        directory, cfg, thinker = load_aligner(path_or_id, device, dtype)
        return cls(thinker, AlignerPrompt(directory, cfg))

    @property
    def cfg(self) -> AlignerConfig:
        return self.thinker.cfg

    @torch.inference_mode()
    def logits(self, audio_16k: np.ndarray, units: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """(input_ids [T], logits [T, classify_num]) of one clip at 16 kHz and its units."""
        device = self.thinker.lm_head.weight.device
        mel = log_mel(torch.as_tensor(peak_limited(audio_16k), device=device), self.cfg.audio.num_mel_bins)
        ids = torch.tensor(self.prompt.ids(units, encoder_frames(mel.shape[1])), device=device)
        return ids, self.thinker(ids, mel)

    def unit_times(self, audio_16k: np.ndarray, text: str) -> list[UnitTime]:
        units = split_units(text)
        if not units:
            return []
        ids, logits = self.logits(audio_16k, [u.text for u in units])
        classes = logits[ids == self.cfg.timestamp_token_id].argmax(-1).tolist()
        times = unit_times(classes, self.cfg.timestamp_segment_time)
        return [UnitTime(u, s, e) for u, (s, e) in zip(units, times, strict=True)]

    def align(self, audio_24k: np.ndarray, text: str) -> list[WordTime]:
        """Word times (samples at 24 kHz from the clip's first sample) of every word of text_words(text)."""
        audio = np.asarray(audio_24k, dtype=np.float32)
        words = text_words(text)
        if not words:
            return []
        timed = self.unit_times(soxr.resample(audio, INPUT_RATE, SAMPLE_RATE), text)
        return word_times(words, timed, len(audio))


def word_times(words: list[TextWord], timed: list[UnitTime], num_samples: int) -> list[WordTime]:
    """Our words (text order) + the aligner's unit times -> one WordTime per word (see the module doc)."""
    firsts = [next((t for t in timed if w.start <= t.unit.start < w.end), None) for w in words]
    starts: list[int] = []
    nxt = num_samples
    for first in reversed(firsts):  # an untimed word starts with the next timed one (times never decrease)
        if first is not None:
            nxt = min(nxt, round(first.start_ms * INPUT_RATE / 1000))
        starts.append(nxt)
    starts.reverse()
    return [WordTime(w.text, s, e) for w, s, e in zip(words, starts, [*starts[1:], num_samples], strict=True)]

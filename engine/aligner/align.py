"""`Aligner.align(audio_24k, text) -> list[WordTime]`: word times of a known text in a 24 kHz clip.

The clip is resampled to 16 kHz (soxr), the aligner gives each of its units (engine/aligner/units.py) a start and
an end, and each word of our own split (engine.words.text_words) starts when its first unit starts. A word with no
unit (only characters the aligner drops, such as "_") starts with the next word that has one, or at the clip's
end. As WordTime says, a word ends where the next one starts, the last one at the end of the clip.
"""

from __future__ import annotations

import functools
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soxr
import torch

from ..qwen3tts.fused_stack import DecoderOps, FusedStack
from ..words import TextWord, WordTime, text_words
from .audio_encoder import encoder_frames
from .batch import hidden_batch, hidden_packed
from .checkpoint import load_aligner
from .config import AlignerConfig
from .decoder_graphs import GRAPH_STEPS, MAX_CLIPS, CapturedDecoder
from .encoder_graphs import MAX_CHUNKS, CapturedEncoder
from .features import SAMPLE_RATE, clips_on_device, log_mel, log_mel_batch, peak_limited
from .model import Thinker
from .prompt import AlignerPrompt
from .timestamps import unit_times
from .units import Unit, split_units

INPUT_RATE = 24_000  # the TTS codec's rate, and WordTime's samples


# A call's clips are resampled on a few threads: soxr releases the GIL, and one after another they were ~14 ms of a
# 56-clip call on this machine's 2 cores (docs/benchmarks/aligner-host), before any of its GPU work could start.
RESAMPLE_THREADS = min(4, os.cpu_count() or 1)


@functools.cache
def _resampler() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(RESAMPLE_THREADS, thread_name_prefix="aligner-resample")


def _to_16k(audio: np.ndarray) -> np.ndarray:
    return soxr.resample(audio, INPUT_RATE, SAMPLE_RATE)


def to_16k(audios_24k: list[np.ndarray]) -> list[np.ndarray]:
    """Each clip at 16 kHz (soxr's default quality), the same samples as one soxr.resample after another."""
    if len(audios_24k) < 2 or RESAMPLE_THREADS < 2:
        return [_to_16k(a) for a in audios_24k]
    return list(_resampler().map(_to_16k, audios_24k))


# An align_batch call's time, in order: the host's three parts, each on a busy server with its waits for the GIL:
# resample (the clips to 16 kHz), prepare (the texts' units and prompts, the clips copied over and their features
# queued), queue (the encoder's and the decoder's work queued); then gpu_wait (blocked until the GPU has run that
# work: on a busy GPU also the time its kernels waited behind others'), post (the head's few rows, the results read,
# the word times).
HOST_PARTS = ("resample", "prepare", "queue")
CALL_PARTS = (*HOST_PARTS, "gpu_wait", "post")
Mark = tuple[float, float]  # (perf_counter, this thread's CPU time) at a point of a call


def mark() -> Mark:
    return time.perf_counter(), time.thread_time()


@dataclass(frozen=True, slots=True)
class UnitTime:
    unit: Unit
    start_ms: int
    end_ms: int


class Aligner:
    """`decoder`: how a batch's prompts go through the text decoder (engine/aligner/batch.py): packed (the fused
    stack, 9 launches a layer; the default on CUDA), padded (the plain batched reference; the default elsewhere:
    the fused stack's CPU attention gathers each token's whole slot) or auto."""

    def __init__(self, thinker: Thinker, prompt: AlignerPrompt, decoder: str = "auto") -> None:
        self.thinker, self.prompt = thinker, prompt
        device = thinker.lm_head.weight.device
        if decoder == "auto":
            decoder = "packed" if device.type == "cuda" else "padded"
        if decoder not in ("packed", "padded"):
            raise ValueError(f"aligner decoder must be packed, padded or auto, not {decoder!r}")
        self.decoder = decoder
        # The fused weights are views the modules share: the one-clip and padded paths keep working on them.
        self.stack = FusedStack(thinker.model, DecoderOps.for_device(device)) if decoder == "packed" else None
        # The packed decoder's attention a block of a clip's tokens at a time (kernels/prefill_attention.py; Triton,
        # so CUDA only) instead of a token at a time: `use_prefill_attention`.
        self.prefill = False
        self.captured: CapturedDecoder | None = None  # `capture()`: the packed decoder from CUDA graphs
        self.encoder: CapturedEncoder | None = None  # `capture(encoder_graphs=True)`: the encoder from CUDA graphs
        self.last_parts: dict[str, float] = {}  # the last align_batch's seconds by part (CALL_PARTS)
        self.last_host_cpu = 0.0  # ... and its thread's CPU seconds in the host's parts (HOST_PARTS)

    def use_prefill_attention(self, on: bool = True) -> None:
        """The packed decoder's attention from kernels/prefill_attention.py (before `capture`; CUDA, or Triton's
        interpreter in the tests)."""
        if on:
            from ...kernels import prefill_attention
            from ...kernels.utils import interpreted

            runs = self.thinker.lm_head.weight.is_cuda or interpreted(prefill_attention._prefill_attention_kernel)
            if self.stack is None or not runs:
                raise ValueError("prefill attention needs the packed decoder on CUDA (a Triton kernel)")
        self.prefill = on

    def capture(self, progress: bool = True, decoder_graphs: bool = True, encoder_graphs: bool = False,
                max_clips: int = MAX_CLIPS, max_chunks: int = MAX_CHUNKS, steps: int = GRAPH_STEPS) -> None:
        """CUDA graphs on the calling thread's stream: the packed decoder's for calls of up to `max_clips` clips
        (decoder_graphs.py; none unless the decoder is packed) and, if asked, the audio encoder's for up to
        `max_chunks` 1-s chunks (encoder_graphs.py); token and chunk buckets `steps` to an octave. Off CUDA the
        same bucketed paths run without graphs."""
        weight = self.thinker.lm_head.weight
        if encoder_graphs:
            encoder = CapturedEncoder(self.thinker.audio_tower, weight.device, weight.dtype, max_chunks=max_chunks,
                                      steps=steps)
            encoder.capture(progress)
            self.encoder = encoder  # as for the decoder: only once every bucket is captured
        if self.stack is None or not decoder_graphs:
            return
        captured = CapturedDecoder(self.stack, self.thinker.model, weight.device, weight.dtype, max_clips=max_clips,
                                   prefill=self.prefill, steps=steps)
        captured.capture(progress)
        self.captured = captured  # only once every bucket is captured: until then calls run eagerly

    @classmethod
    def from_pretrained(cls, path_or_id: str | Path, device: str | torch.device = "cpu",
                        dtype: torch.dtype = torch.float32, progress: bool = False,
                        decoder: str = "auto") -> Aligner:
        directory, cfg, thinker = load_aligner(path_or_id, device, dtype, progress)
        return cls(thinker, AlignerPrompt(directory, cfg), decoder)

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

    def _hidden_batch(self, clips_16k: list[np.ndarray], units: list[list[str]],
                      padded: bool = False, marks: list[Mark] | None = None) -> tuple[torch.Tensor, ...]:
        """(ids, hidden): [B, T] and [B, T, H] right-padded (the padded decoder, or `padded`), else [N] and [N, H]
        packed; either way a clip's tokens in order, clip after clip, where the padding is left out. `marks` gets
        the moment the features were queued and the prompts built."""
        device = self.thinker.lm_head.weight.device
        mel, frames = log_mel_batch(clips_on_device(clips_16k, device), self.cfg.audio.num_mel_bins)
        prompts = [self.prompt.ids(u, encoder_frames(t)) for u, t in zip(units, frames, strict=True)]
        if marks is not None:
            marks.append(mark())
        if self.stack is not None and not padded:
            return hidden_packed(self.thinker, self.stack, prompts, mel, frames, self.captured, self.encoder,
                                 self.prefill)
        return hidden_batch(self.thinker, prompts, mel, frames, self.prompt.audio_end, self.encoder)

    @torch.inference_mode()
    def logits_batch(self, clips_16k: list[np.ndarray], units: list[list[str]]) -> tuple[torch.Tensor, torch.Tensor]:
        """`logits` of B clips in one batch: (input_ids [B, T], logits [B, T, classify_num]), each prompt
        right-padded with <|audio_end|> to the longest (engine/aligner/batch.py)."""
        ids, hidden = self._hidden_batch(clips_16k, units, padded=True)
        return ids, self.thinker.lm_head(hidden)

    @torch.inference_mode()
    def unit_times_batch(self, clips_16k: list[np.ndarray], texts: list[str],
                         marks: list[Mark] | None = None) -> list[list[UnitTime]]:
        """`unit_times` of B clips (16 kHz) and their texts in one encoder and one decoder call. `marks`: gets the
        moments the features were queued (and the prompts built), the network's work was all queued and the GPU had
        run it."""
        if len(clips_16k) != len(texts):
            raise ValueError(f"{len(clips_16k)} clips for {len(texts)} texts")
        units = [split_units(t) for t in texts]
        rows = [i for i, u in enumerate(units) if u]  # a text without units runs nothing, as alone
        out: list[list[UnitTime]] = [[] for _ in texts]
        if not rows:
            return out
        ids, hidden = self._hidden_batch([clips_16k[i] for i in rows], [[u.text for u in units[i]] for i in rows],
                                         marks=marks)
        if marks is not None:  # the mask below waits for the GPU anyway: waited here, that wait is timed apart
            marks.append(mark())
            if hidden.is_cuda:
                torch.cuda.current_stream(hidden.device).synchronize()
            marks.append(mark())
        # The head only where it is read: the <timestamp> slots, row after row.
        classes = self.thinker.lm_head(hidden[ids == self.cfg.timestamp_token_id]).argmax(-1).tolist()
        for i in rows:
            mine, classes = classes[: 2 * len(units[i])], classes[2 * len(units[i]):]
            times = unit_times(mine, self.cfg.timestamp_segment_time)
            out[i] = [UnitTime(u, s, e) for u, (s, e) in zip(units[i], times, strict=True)]
        return out

    def align_batch(self, audios_24k: list[np.ndarray], texts: list[str]) -> list[list[WordTime]]:
        """`align` of B clips (24 kHz) and their texts, the network run once for all of them."""
        if len(audios_24k) != len(texts):
            raise ValueError(f"{len(audios_24k)} clips for {len(texts)} texts")
        start = mark()
        audios = [np.asarray(a, dtype=np.float32) for a in audios_24k]
        words = [text_words(t) for t in texts]
        rows = [i for i, w in enumerate(words) if w]
        clips_16k = to_16k([audios[i] for i in rows])
        marks = [start, mark()]
        timed = self.unit_times_batch(clips_16k, [texts[i] for i in rows], marks)
        out: list[list[WordTime]] = [[] for _ in texts]
        for i, t in zip(rows, timed, strict=True):
            out[i] = word_times(words[i], t, len(audios[i]))
        end = mark()
        marks += [end] * (len(CALL_PARTS) + 1 - len(marks))  # nothing ran: the rest of it is `prepare`
        self.last_parts = {part: b[0] - a[0] for part, a, b in zip(CALL_PARTS, marks[:-1], marks[1:], strict=True)}
        # the host's CPU time in its parts: against their wall time, how long the thread waited (for the GIL, the
        # resampling threads, or in a CUDA call that blocked)
        self.last_host_cpu = marks[len(HOST_PARTS)][1] - start[1]
        return out

    def align(self, audio_24k: np.ndarray, text: str) -> list[WordTime]:
        """Word times (samples at 24 kHz from the clip's first sample) of every word of text_words(text)."""
        audio = np.asarray(audio_24k, dtype=np.float32)
        words = text_words(text)
        if not words:
            return []
        timed = self.unit_times(_to_16k(audio), text)
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

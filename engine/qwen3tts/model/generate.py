"""Offline generation, eager and batch 1: `voxgate synth`, and the reference the batched engine loop (runner.py) is
tested against stream by stream.

`Qwen3TTS.frames(...)` yields one [16] code frame per Talker step (design §5); `decode` turns codes into audio;
`synthesize` does both. A frame budget (`max_frames`) ends a stream that never samples EOS (random weights).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..codec.codec import CodecDecoder
from ..codec.codec_encoder import CodecEncoder, resample
from .checkpoint import load_checkpoint
from .config import GenerationConfig, Qwen3TTSConfig
from .prompt import Prompt, PromptError, PromptInputs, build_prompt, instruct_text, ref_text, target_text
from .sampling import CodebookZeroRules, SamplingParams, pick
from .speaker_encoder import SpeakerEncoder
from .talker import Talker
from .tokenizer import TextTokenizer

SAMPLE_RATE = 24_000
DTYPES = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp16": torch.float16, "float16": torch.float16,
          "fp32": torch.float32, "float32": torch.float32, "fp64": torch.float64, "float64": torch.float64}


@dataclass(slots=True)
class Voice:
    """What a request conditions on: a CustomVoice speaker, or (Base) an x-vector and optional ICL reference."""

    speaker: str | None = None
    x_vector: torch.Tensor | None = None
    ref_text: str | None = None
    ref_codes: torch.Tensor | None = None  # [T_ref, 16]
    ref_ids: list[int] | None = None  # ref_text tokenized (`prompt.ref_text(...)` whole), when cached; else on use


class Qwen3TTS:
    def __init__(self, cfg: Qwen3TTSConfig, talker: Talker, codec: CodecDecoder, tokenizer: TextTokenizer,
                 speaker_encoder: SpeakerEncoder | None = None, codec_encoder: CodecEncoder | None = None) -> None:
        self.cfg = cfg
        self.talker = talker
        self.codec = codec
        self.tokenizer = tokenizer
        self.speaker_encoder = speaker_encoder
        self.codec_encoder = codec_encoder
        self.rules = CodebookZeroRules(cfg.talker.layers.vocab_size, cfg.talker.codec_eos_token_id, 1.0)

    @classmethod
    def from_pretrained(cls, path_or_id: str | Path, device: str | torch.device = "cpu",
                        dtype: torch.dtype | str = torch.bfloat16, codec_dtype: torch.dtype | str = torch.float32,
                        progress: bool = True, with_encoder: bool | None = None) -> Qwen3TTS:
        """with_encoder: the codec encoder (voice cloning) as `load_checkpoint` takes it; None: when the file has it."""
        dtype = DTYPES[dtype] if isinstance(dtype, str) else dtype
        codec_dtype = DTYPES[codec_dtype] if isinstance(codec_dtype, str) else codec_dtype
        directory, cfg, weights, codec = load_checkpoint(path_or_id, device, dtype, codec_dtype, progress,
                                                         with_encoder=with_encoder)
        return cls(cfg, weights.talker, codec.decoder, TextTokenizer(directory), weights.speaker_encoder, codec.encoder)

    @property
    def device(self) -> torch.device:
        return next(self.talker.parameters()).device

    # -- front end ---------------------------------------------------------------------------------------------
    def prompt_inputs(self, text: str, voice: Voice | str | None = None, language: str | None = None,
                      instruct: str | None = None, non_streaming: bool | None = None) -> PromptInputs:
        """Tokenize and validate a request the way the reference wrapper would (mode from the checkpoint type)."""
        v = Voice(speaker=voice) if isinstance(voice, str) else (voice or Voice())
        kind = self.cfg.tts_model_type
        if kind == "custom_voice" and not v.speaker:
            raise PromptError(f"a speaker is required; choose one of {self.cfg.speakers}")
        if v.speaker and v.speaker.lower() not in self.cfg.talker.spk_id and kind == "custom_voice":
            raise PromptError(f"speaker {v.speaker!r} is not supported; choose one of {self.cfg.speakers}")
        if kind != "custom_voice" and v.speaker:
            raise PromptError(f"this {kind} checkpoint has no named speakers")
        if kind == "voice_design" and not instruct:
            raise PromptError("VoiceDesign needs an instruct (a description of the voice)")
        if kind == "base" and v.x_vector is None:
            raise PromptError("Base needs a reference voice (an x-vector, and ref codes + transcript for ICL)")
        icl = v.ref_codes is not None
        if non_streaming is None:
            non_streaming = not icl  # wrapper defaults: custom/design True, voice clone False
        use_instruct = instruct if instruct and self.cfg.supports_instruct else None
        return PromptInputs(
            text_ids=self.tokenizer.encode(target_text(text)),
            language=language or "auto",
            speaker=v.speaker,
            instruct_ids=self.tokenizer.encode(instruct_text(use_instruct)) if use_instruct else None,
            x_vector=v.x_vector,
            ref_ids=(v.ref_ids if v.ref_ids is not None else self.tokenizer.encode(ref_text(v.ref_text)))
            if icl and v.ref_text is not None else None,
            ref_codes=v.ref_codes,
            non_streaming=non_streaming,
        )

    def speaker_embedding(self, audio: np.ndarray, sr: int = SAMPLE_RATE) -> torch.Tensor:
        if self.speaker_encoder is None:
            raise PromptError("only Base checkpoints have a speaker encoder")
        return self.speaker_encoder.embed(audio, sr)

    def encode(self, audio: np.ndarray | torch.Tensor, sr: int = SAMPLE_RATE) -> torch.Tensor:
        """Mono float audio in [-1, 1] -> codec codes [ceil(N_24k / 1920), 16] (int64, on the model device).
        Other rates are resampled to 24 kHz first, as the reference does (soxr HQ)."""
        if self.codec_encoder is None:
            raise PromptError("this checkpoint has no codec encoder (speech_tokenizer/ without encoder.* weights)")
        if sr != SAMPLE_RATE:
            audio = resample(np.asarray(audio, dtype=np.float32), sr, SAMPLE_RATE)
        return self.codec_encoder.encode(audio)

    def clone_voice(self, audio: np.ndarray, sr: int = SAMPLE_RATE, ref_text: str | None = None) -> Voice:
        """Base: the voice of a reference recording, as the reference's `create_voice_clone_prompt` builds it: the
        x-vector always; with its transcript, also the reference codes for in-context cloning (ICL)."""
        audio = np.asarray(audio, dtype=np.float32)
        if audio.ndim > 1:
            audio = audio.mean(axis=-1)  # channels last, as the reference averages them
        wav = resample(audio, sr, SAMPLE_RATE)
        x_vector = self.speaker_embedding(wav, SAMPLE_RATE)
        if not ref_text:
            return Voice(x_vector=x_vector)
        return Voice(x_vector=x_vector, ref_text=ref_text, ref_codes=self.encode(wav))

    def build(self, inputs: PromptInputs) -> Prompt:
        return build_prompt(self.talker, self.cfg, inputs)

    # -- generation --------------------------------------------------------------------------------------------
    @torch.inference_mode()
    def frames(self, prompt: Prompt, gen: GenerationConfig | None = None, max_frames: int | None = None,
               generator: torch.Generator | None = None, cancel: threading.Event | None = None,
               min_frames: int = 2) -> Iterator[torch.Tensor]:
        """Yield frames [16] (int64, on the model device) until EOS, `max_frames`, or `cancel` is set.

        EOS is blocked for the first `min_frames` frames (the reference's min_new_tokens=2; benchmarks raise it
        to get a fixed length).

        RNG order equals the reference's: the c0 draw of frame s, then its 15 predictor draws, then frame s+1.
        """
        gen = gen or self.cfg.generation
        budget = max_frames if max_frames is not None else gen.max_new_tokens - 1  # reference: N samples, N-1 frames
        talker = self.talker
        p0 = SamplingParams(gen.do_sample, gen.temperature, gen.top_k, gen.top_p)
        psub = SamplingParams(gen.subtalker_dosample, gen.subtalker_temperature, gen.subtalker_top_k,
                              gen.subtalker_top_p)
        self.rules.penalty = gen.repetition_penalty
        self.rules.min_new_tokens = min_frames
        eos = self.cfg.talker.codec_eos_token_id
        embeds = prompt.embeds[None]  # [1, T, H]
        cache = talker.new_cache(1, embeds.shape[1] + max(budget, 0) + 1, embeds.dtype, embeds.device)
        previous = torch.empty((1, 0), dtype=torch.long, device=embeds.device)
        if budget <= 0:
            return
        hidden = talker(embeds, cache)[:, -1]  # [1, H]
        for step in range(budget):
            if cancel is not None and cancel.is_set():
                return
            logits = self.rules.apply(talker.codec_head(hidden).float(), previous)
            c0 = pick(logits, p0, generator)  # [1]
            if int(c0.item()) == eos:
                return  # the EOS frame is not emitted
            rest = talker.code_predictor.predict(hidden, talker.codec_embed(c0), lambda lg: pick(lg, psub, generator))
            frame = torch.cat([c0[:, None], rest], dim=1)  # [1, 16]
            yield frame[0]
            if step + 1 == budget:
                return
            text = prompt.trailing[step] if step < prompt.trailing.shape[0] else prompt.tts_pad
            hidden = talker((talker.frame_embed(frame) + text)[:, None], cache)[:, -1]
            previous = torch.cat([previous, c0[:, None]], dim=1)

    def generate_codes(self, prompt: Prompt, gen: GenerationConfig | None = None, max_frames: int | None = None,
                       generator: torch.Generator | None = None, min_frames: int = 2) -> torch.Tensor:
        """All frames of one utterance: [N, 16] int64 on the model device."""
        out = list(self.frames(prompt, gen, max_frames, generator, min_frames=min_frames))
        return torch.stack(out) if out else torch.empty((0, 16), dtype=torch.long, device=self.device)

    def decode(self, codes: torch.Tensor, ref_codes: torch.Tensor | None = None) -> np.ndarray:
        """Whole-utterance codec decode -> float32 [N * 1920]. ICL: decode ref ++ codes and cut the reference."""
        if codes.shape[0] == 0:
            return np.zeros(0, dtype=np.float32)
        if ref_codes is not None:
            full = self.codec.decode(torch.cat([ref_codes.to(codes.device), codes]))
            return full[ref_codes.shape[0] * self.cfg.codec.samples_per_frame:].cpu().numpy()
        return self.codec.decode(codes).cpu().numpy()

    def synthesize(self, text: str, voice: Voice | str | None = None, language: str | None = None,
                   instruct: str | None = None, gen: GenerationConfig | None = None, max_frames: int | None = None,
                   seed: int | None = None, non_streaming: bool | None = None) -> np.ndarray:
        prompt = self.build(self.prompt_inputs(text, voice, language, instruct, non_streaming))
        generator = torch.Generator(self.device).manual_seed(seed) if seed is not None else None
        codes = self.generate_codes(prompt, gen, max_frames, generator)
        return self.decode(codes, prompt.ref_codes)

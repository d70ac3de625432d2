"""The aligner network: audio encoder + Qwen3 text decoder + timestamp head, in the checkpoint's key layout.

One forward pass, no generation: the prompt (engine/aligner/prompt.py) holds one <|audio_pad|> per encoder frame,
whose embeddings are replaced by the encoder's output, then the words with two <timestamp> tokens after each.
The decoder is causal, so a word's <timestamp> slots see the whole clip and the words before it. The head maps
every position to `classify_num` classes; at a <timestamp> slot, class k means k * timestamp_segment_time ms.
The decoder's MRoPE gets the same position on its three streams (text-only positions), which is plain RoPE.
"""

from __future__ import annotations

import torch
from torch import nn

from ..qwen3tts.model.layers import DecoderStack
from .audio_encoder import AudioEncoder
from .config import AlignerConfig


class TextDecoder(DecoderStack):
    """`thinker.model.*`: token embeddings, then the Qwen3 layers and final norm."""

    def __init__(self, cfg: AlignerConfig) -> None:
        super().__init__(cfg.text)
        self.embed_tokens = nn.Embedding(cfg.text.vocab_size, cfg.text.hidden_size)


class Thinker(nn.Module):
    def __init__(self, cfg: AlignerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.audio_tower = AudioEncoder(cfg.audio)
        self.model = TextDecoder(cfg)
        self.lm_head = nn.Linear(cfg.text.hidden_size, cfg.classify_num, bias=False)

    def forward(self, input_ids: torch.Tensor, mel: torch.Tensor) -> torch.Tensor:
        """input_ids [T] (one prompt), mel [n_mels, frames] -> timestamp-class logits [T, classify_num]."""
        audio = self.audio_tower(mel.to(self.lm_head.weight.dtype))  # [N, H]
        x = self.model.embed_tokens(input_ids)
        slots = input_ids == self.cfg.audio_token_id
        if int(slots.sum()) != audio.shape[0]:
            raise ValueError(f"prompt has {int(slots.sum())} audio slots for {audio.shape[0]} encoder frames")
        x = x.masked_scatter(slots[:, None], audio.to(x.dtype))
        cache = self.model.new_cache(1, x.shape[0], x.dtype, x.device)
        return self.lm_head(self.model(x[None], cache)[0])


class AlignerWeights(nn.Module):
    """The `model.safetensors` module tree: everything under `thinker.`."""

    def __init__(self, cfg: AlignerConfig) -> None:
        super().__init__()
        self.thinker = Thinker(cfg)

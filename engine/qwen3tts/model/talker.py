"""The Talker: a Qwen3 decoder over summed text+codec embeddings that predicts codebook 0 (design §2)."""

from __future__ import annotations

import torch
from torch import nn

from .code_predictor import CodePredictor
from .config import TalkerConfig
from .layers import DecoderStack, KVCache


class TalkerModel(DecoderStack):
    """`talker.model.*`: the backbone plus its two input tables (official flat key names)."""

    def __init__(self, cfg: TalkerConfig) -> None:
        super().__init__(cfg.layers)
        self.codec_embedding = nn.Embedding(cfg.layers.vocab_size, cfg.layers.hidden_size)
        self.text_embedding = nn.Embedding(cfg.text_vocab_size, cfg.text_hidden_size)


class TextProjection(nn.Module):
    """ResizeMLP text_hidden -> text_hidden -> H with bias and SiLU."""

    def __init__(self, text_hidden: int, hidden: int) -> None:
        super().__init__()
        self.linear_fc1 = nn.Linear(text_hidden, text_hidden, bias=True)
        self.linear_fc2 = nn.Linear(text_hidden, hidden, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_fc2(nn.functional.silu(self.linear_fc1(x)))


class Talker(nn.Module):
    def __init__(self, cfg: TalkerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.model = TalkerModel(cfg)
        self.text_projection = TextProjection(cfg.text_hidden_size, cfg.layers.hidden_size)
        self.codec_head = nn.Linear(cfg.layers.hidden_size, cfg.layers.vocab_size, bias=False)
        self.code_predictor = CodePredictor(cfg.code_predictor, cfg.layers.hidden_size, cfg.num_code_groups)

    def text_embed(self, ids: torch.Tensor) -> torch.Tensor:
        """T(x): ids [...] -> [..., H]. The big table is only gathered, never multiplied per step."""
        return self.text_projection(self.model.text_embedding(ids))

    def codec_embed(self, ids: torch.Tensor) -> torch.Tensor:
        """C(id): codebook-0 codes and special rows of the Talker's own table."""
        return self.model.codec_embedding(ids)

    def frame_embed(self, frame: torch.Tensor) -> torch.Tensor:
        """F(frame) = C(c0) + sum_k E_k(c_k): frame [..., 16] -> [..., H].

        Stacked then summed in one reduction, as the reference does, so the rounding matches.
        """
        rows = [self.codec_embed(frame[..., 0])]
        rows += [table(frame[..., k]) for k, table in enumerate(self.code_predictor.model.codec_embedding, start=1)]
        return torch.stack(rows, dim=-2).sum(-2)

    def new_cache(self, batch: int, capacity: int, dtype: torch.dtype, device: torch.device) -> KVCache:
        return self.model.new_cache(batch, capacity, dtype, device)

    def forward(self, embeds: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """embeds [B, T, H] -> post-norm hidden [B, T, H] (the same vector feeds codec_head and the predictor)."""
        return self.model(embeds, cache)

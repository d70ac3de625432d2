"""The code predictor ("sub-talker"): a 5-layer depth transformer that fills codebooks 1..15 of a frame (design §6)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from .config import DecoderLayersConfig
from .layers import DecoderStack


class CodePredictorModel(DecoderStack):
    """`talker.code_predictor.model.*`. Its 15 embedding tables are Talker-width (they also feed the Talker)."""

    def __init__(self, cfg: DecoderLayersConfig, talker_hidden: int, num_code_groups: int) -> None:
        super().__init__(cfg)
        self.codec_embedding = nn.ModuleList(
            nn.Embedding(cfg.vocab_size, talker_hidden) for _ in range(num_code_groups - 1)
        )


class CodePredictor(nn.Module):
    def __init__(self, cfg: DecoderLayersConfig, talker_hidden: int, num_code_groups: int) -> None:
        super().__init__()
        self.cfg = cfg
        self.num_code_groups = num_code_groups
        self.model = CodePredictorModel(cfg, talker_hidden, num_code_groups)
        self.lm_head = nn.ModuleList(
            nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False) for _ in range(num_code_groups - 1)
        )
        # 1.7B projects Talker width 2048 -> 1024 (with bias); 0.6B has equal widths and no tensor at all.
        self.small_to_mtp_projection: nn.Module = (
            nn.Linear(talker_hidden, cfg.hidden_size, bias=True) if talker_hidden != cfg.hidden_size
            else nn.Identity()
        )

    def predict(self, hidden: torch.Tensor, c0_embed: torch.Tensor,
                pick: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        """Codes 1..15 for one frame.

        hidden [B, H] is the Talker's post-norm output, c0_embed [B, H] = C(c0). `pick` maps fp32 logits [B, V] to
        ids [B]; it is called 15 times in order, so a seeded sampler consumes RNG exactly as the reference does.
        Returns [B, 15].
        """
        stack = self.model
        cache = stack.new_cache(hidden.shape[0], self.num_code_groups, hidden.dtype, hidden.device)
        x = self.small_to_mtp_projection(torch.stack((hidden, c0_embed), dim=1))  # [B, 2, Hcp]
        codes = []
        for k in range(self.num_code_groups - 1):
            out = stack(x, cache)[:, -1]
            code = pick(self.lm_head[k](out).float())
            codes.append(code)
            if k + 1 < self.num_code_groups - 1:
                # E_15 is never fed back: it is only used in the Talker's frame sum.
                x = self.small_to_mtp_projection(self.model.codec_embedding[k](code))[:, None]
        return torch.stack(codes, dim=-1)

"""The batched step's math: the Talker over tokens of many streams with its KV cache in a slot pool, prompt rows
embedded from ids, and one decode step for many rows. Plain PyTorch over the port's modules (talker.py,
code_predictor.py, layers.py), with no host sync and no shape that depends on data, so the runner can capture it
in a CUDA graph per bucket. The eager batch-1 path (generate.py) is the reference every piece is tested against.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from .layers import DecoderStack, apply_rope
from .prompt import XVEC
from .sampling import (
    DO_SAMPLE,
    MIN_NEW,
    PENALTY,
    SUB_DO_SAMPLE,
    SUB_TEMPERATURE,
    SUB_TOP_K,
    SUB_TOP_P,
    TEMPERATURE,
    TOP_K,
    TOP_P,
    codebook_zero_rules,
    sample_rows,
)
from .talker import Talker

# (q [N, Hq, D], k_cache [S, Hkv, P, D], v_cache, slots [N], lengths [N]) -> [N, Hq, D]
Attend = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass
class SlotState:
    """Per-stream tensors the step reads and writes in place, indexed by slot (slot 0: the padding sink)."""

    k_cache: list[torch.Tensor]  # per layer [S, Hkv, P, D] (views into the KV SlotPool)
    v_cache: list[torch.Tensor]
    cos: torch.Tensor  # [P, D] RoPE tables for positions 0..P-1
    sin: torch.Tensor
    hidden: torch.Tensor  # [S, H] the Talker's last post-norm output of each stream
    seen: torch.Tensor  # [S, V] bool: codebook-0 ids generated so far (repetition penalty)
    params: torch.Tensor  # [S, NUM_PARAMS] float32 sampling parameters (sampling.py columns)
    trailing: torch.Tensor  # [S, T + 1] int64 text ids added to decode steps 0.. (tts_pad from trailing_len on)
    trailing_len: torch.Tensor  # [S] int64
    x_vector: torch.Tensor  # [S, H] Base: the speaker row of the prompt
    ring: torch.Tensor  # [S, RING, Q] int64 frames by index % RING, until the codec has them


def talker_tokens(stack: DecoderStack, x: torch.Tensor, state: SlotState, slots: torch.Tensor,
                  positions: torch.Tensor, attend: Attend) -> torch.Tensor:
    """x [N, H]: one token each at (slots[i], positions[i]) -> post-norm hidden [N, H]. Each token's key and value
    are written into its slot first; then it attends to its slot's positions 0..positions[i] (own length only)."""
    n = x.shape[0]
    cos, sin = state.cos[positions][:, None], state.sin[positions][:, None]  # [N, 1, D]
    lengths = positions + 1
    for i, layer in enumerate(stack.layers):
        a = layer.self_attn
        h = layer.input_layernorm(x)
        q = a.q_proj(h).view(n, a.heads, a.head_dim)
        k = a.k_proj(h).view(n, a.kv_heads, a.head_dim)
        v = a.v_proj(h).view(n, a.kv_heads, a.head_dim)
        if a.q_norm is not None and a.k_norm is not None:
            q, k = a.q_norm(q), a.k_norm(k)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        state.k_cache[i][slots, :, positions] = k
        state.v_cache[i][slots, :, positions] = v
        o = attend(q, state.k_cache[i], state.v_cache[i], slots, lengths)
        x = x + a.o_proj(o.reshape(n, -1))
        x = x + layer.mlp(layer.post_attention_layernorm(x))
    return stack.norm(x)


def embed_rows(talker: Talker, text: torch.Tensor, codec: torch.Tensor, x_vector: torch.Tensor) -> torch.Tensor:
    """Prompt rows from ids (prompt.PromptRows): text [N] and codec [N, Q] int64 (NO_ID absent, XVEC in column 0:
    the row's x-vector), x_vector [N, H] -> [N, H] = T(text) + sum_k table_k(codec[:, k]) (+ x-vector).

    The codec term is stacked then summed as Talker.frame_embed sums a frame; absent terms are exact zeros, so
    every row equals build_prompt's up to the batch size of the matmuls."""
    zero = torch.zeros((), dtype=x_vector.dtype, device=x_vector.device)
    t = torch.where((text >= 0)[:, None], talker.text_embed(text.clamp(min=0)), zero)
    tables = [talker.model.codec_embedding, *talker.code_predictor.model.codec_embedding]
    rows = torch.stack([table(codec[:, k].clamp(min=0)) for k, table in enumerate(tables)], dim=-2)  # [N, Q, H]
    c = torch.where((codec >= 0)[..., None], rows, zero).sum(-2)
    out = t + c
    return torch.where((codec[:, 0] == XVEC)[:, None], out + x_vector, out)


@dataclass
class DecodeRows:
    """A step's decode rows: slot, KV position of the new frame's input, and frames made so far (= the frame's
    index), each [R] int64. Teacher forcing (tests): `forced` [R, Q] codes used where `force` [R] is set."""

    slots: torch.Tensor
    positions: torch.Tensor
    frame_index: torch.Tensor
    forced: torch.Tensor | None = None
    force: torch.Tensor | None = None


def decode_frames(talker: Talker, state: SlotState, rows: DecodeRows, eos_id: int, suppress: torch.Tensor,
                  candidates: int, logits_out: list[torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one frame per row from its stream's last hidden state: codebook 0 (penalty, EOS block, suppression,
    sampling), then the code predictor's 15 passes. Returns (frames [R, Q] int64, the next Talker input [R, H] =
    F(frame) + T(the stream's next trailing text id)). Marks codebook 0 seen and stores the frame in the ring.
    logits_out (tests): receives the fp32 logits of codebook 0 [R, V] then of codebooks 1..15 [R, V'] each."""
    slots = rows.slots
    h = state.hidden[slots]  # [R, H]
    p = state.params[slots]  # [R, NUM_PARAMS]
    logits = talker.codec_head(h).float()
    logits = codebook_zero_rules(logits, state.seen[slots], p[:, PENALTY], rows.frame_index, p[:, MIN_NEW], eos_id,
                                 suppress)
    code_k = 0

    def pick(lg: torch.Tensor) -> torch.Tensor:
        nonlocal code_k
        cols = (TEMPERATURE, TOP_K, TOP_P, DO_SAMPLE) if code_k == 0 else \
            (SUB_TEMPERATURE, SUB_TOP_K, SUB_TOP_P, SUB_DO_SAMPLE)
        ids = sample_rows(lg, *(p[:, c] for c in cols), candidates)
        if logits_out is not None:
            logits_out.append(lg)
        if rows.forced is not None and rows.force is not None:
            ids = torch.where(rows.force, rows.forced[:, code_k], ids)
        code_k += 1
        return ids

    c0 = pick(logits)
    state.seen.index_put_((slots, c0), torch.ones_like(c0, dtype=torch.bool))
    rest = talker.code_predictor.predict(h, talker.codec_embed(c0), pick)  # [R, Q-1]
    frames = torch.cat([c0[:, None], rest], dim=1)
    state.ring[slots, rows.frame_index % state.ring.shape[1]] = frames
    text_index = torch.minimum(rows.frame_index, state.trailing_len[slots])
    text = talker.text_embed(state.trailing[slots, text_index])
    return frames, talker.frame_embed(frames) + text

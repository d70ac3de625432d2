"""Many clips through the aligner in one encoder call and one decoder call (docs/aligner.md, "Many clips at once").

Every clip gets what it gets alone (Thinker.forward, AudioEncoder.forward: the plain one-clip reference):

- **Convs**: all chunks of all clips go through the three convs as one [chunks, 1, mels, 100] batch. Alone, a clip
  of more than one chunk zero-pads its short last chunk to 100 frames too, so those chunks are as they are alone.
  A clip of one short chunk runs alone at its own width: here it is zero-padded to 100 and each conv's output is
  zeroed past the frames it has alone, which is exactly the zero padding its own convs see at its end.
- **Encoder layers**: every clip's attention windows (each clip's own size, AudioEncoder.window_size) are packed
  into the rows of one [rows, S, D] batch, S the longest window (windows.py: several short windows share a row),
  under a per-row [S, S] mask that lets a frame see its own window's frames only, never another window's, let
  alone another clip's. encoder_graphs.CapturedEncoder replays the same convs, layers and head from CUDA graphs
  (engine option `aligner_encoder_graphs`).
- **Decoder, packed** (`hidden_packed`, the default on CUDA): every clip's prompt back to back as one token
  stream through the fused decoder stack of the TTS step (engine/qwen3tts/fused_stack.py: 9 launches a layer,
  Triton kernels on CUDA), each clip its own KV slot and positions 0..T-1, so a token attends to its own clip's
  earlier tokens only, as alone. No padding is computed.
- **Decoder, padded** (`hidden_batch`, the reference): prompts are right-padded to the longest. With right
  padding a real position's keys (itself and the positions before it) are all real and its RoPE position is its
  index, as alone, so the one-clip path's causal mask and positions 0..T-1 already give every real position its
  one-clip result: no key padding mask and no per-row positions are needed, and the shared DecoderStack is
  unchanged. The padded positions' outputs are never read. (Left padding would need both; it only pays for
  generation, which the aligner does not do.)
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from ..graphs import to_device
from ..qwen3tts.fused_stack import FusedStack
from .audio_encoder import AudioEncoder, conv_frames, encoder_frames, sinusoids
from .config import CHUNK_FRAMES
from .decoder_graphs import CapturedDecoder
from .model import Thinker
from .windows import WindowLayout

# encoder_graphs.CapturedEncoder: (mel, frames) -> encode_batch's result (named by its call, not imported: that
# module builds on this one)
Encoder = Callable[[torch.Tensor, list[int]], torch.Tensor]


def chunk_lengths(frames: int) -> list[int]:
    """Mel frames of every chunk of a clip of `frames` frames: 100 each, the last one fewer."""
    full, rest = divmod(frames, CHUNK_FRAMES)
    return [CHUNK_FRAMES] * full + ([rest] if rest else [])


def conv_chunks(tower: AudioEncoder, chunks: torch.Tensor, limit: torch.Tensor,
                positions: torch.Tensor) -> torch.Tensor:
    """chunks [n, 1, mels, 100], limit [n] mel frames each chunk has alone, positions [13, d_model] (sinusoids) ->
    [n, 13, d_model]: the three convs, each output zeroed past the frames its chunk has alone, conv_out, positions.

    The first conv (one input channel, the call's largest tensor: [n, 480, 64, 50]) is one matmul of each output's
    3x3 patch and a bias column against [weight | bias], written channels-last, which the second conv takes as is
    (cuDNN converts NCHW otherwise). Past a chunk's frames its patch and bias column are zero, so the output there
    is GELU(0) = 0: no mask pass over that tensor."""
    conv = tower.conv2d1
    n, _, mels, width = chunks.shape
    f, t = (mels - 1) // 2 + 1, (width - 1) // 2 + 1  # one conv's output: kernel 3, stride 2, padding 1
    limit = (limit - 1) // 2 + 1
    keep = (torch.arange(t, device=chunks.device) < limit[:, None]).to(chunks.dtype)  # [n, t]
    keep = keep[:, None, :, None].expand(n, f, t, 1).reshape(n * f * t, 1)
    # every output's 3x3 patch (mel offset, frame offset) as a strided view of the padded chunks, copied once
    # (F.unfold's im2col is a launch per chunk)
    patches = F.pad(chunks[:, 0], (1, 1, 1, 1)).unfold(1, 3, 2).unfold(2, 3, 2).reshape(n * f * t, 9)
    weight = torch.cat((conv.weight.flatten(1), conv.bias[:, None]), dim=1)  # [C, 10]
    x = F.gelu(torch.cat((patches * keep, keep), dim=1) @ weight.T)  # [n f t, C]: channels-last, one GEMM
    x = x.view(n, f, t, -1).permute(0, 3, 1, 2)  # [n, C, f, t] in channels-last memory
    for conv in (tower.conv2d2, tower.conv2d3):
        x = F.gelu(conv(x))
        limit = (limit - 1) // 2 + 1
        x = x * (torch.arange(x.shape[-1], device=x.device) < limit[:, None])[:, None, None, :]
    n, c, f, tc = x.shape
    return tower.conv_out(x.permute(0, 3, 1, 2).reshape(n, tc, c * f)) + positions[None]


def chunk_limits(frames: list[int]) -> list[int]:
    """Mel frames every chunk keeps through the convs, clip after clip: all 100 (padding included) unless its clip
    is one short chunk."""
    return [n if len(lengths) == 1 else CHUNK_FRAMES for lengths in map(chunk_lengths, frames) for n in lengths]


def window_lengths(tower: AudioEncoder, frames: list[int]) -> list[int]:
    """Encoder frames in every attention window, clip after clip (each clip's windows of its own size)."""
    windows: list[int] = []
    for t in frames:
        total, size = encoder_frames(t), tower.window_size(t)
        windows += [size] * (total // size) + ([total % size] if total % size else [])
    return windows


def head(tower: AudioEncoder, h: torch.Tensor) -> torch.Tensor:
    """The encoder's last LayerNorm and its two projections: [..., d_model] -> [..., output_dim]."""
    return tower.proj2(F.gelu(tower.proj1(tower.ln_post(h))))


def embed_chunks_batch(tower: AudioEncoder, mel: torch.Tensor, frames: list[int]) -> torch.Tensor:
    """mel [B, n_mels, T] (zeros past each clip's frames) -> every clip's conv frames with positions, clip after
    clip [sum of encoder_frames, d_model]: AudioEncoder.embed_chunks of each clip, concatenated."""
    width = -(-mel.shape[2] // CHUNK_FRAMES) * CHUNK_FRAMES
    mel = F.pad(mel, (0, width - mel.shape[2]))
    b, n_mels, _ = mel.shape
    per_clip = [chunk_lengths(t) for t in frames]
    exists = torch.zeros(b, width // CHUNK_FRAMES, dtype=torch.bool)
    for i, lengths in enumerate(per_clip):
        exists[i, : len(lengths)] = True
    chunks = mel.view(b, n_mels, -1, CHUNK_FRAMES).transpose(1, 2)[exists.to(mel.device)]  # [chunks, mels, 100]
    tc = conv_frames(CHUNK_FRAMES)
    positions = sinusoids(tc, tower.cfg.d_model).to(mel.device, mel.dtype)
    x = conv_chunks(tower, chunks[:, None], torch.tensor(chunk_limits(frames), device=mel.device), positions)
    keep = torch.tensor([[t < conv_frames(m) for t in range(tc)] for lengths in per_clip for m in lengths])
    return x[keep.to(x.device)]


def encode_batch(tower: AudioEncoder, mel: torch.Tensor, frames: list[int], share: bool = True) -> torch.Tensor:
    """mel [B, n_mels, T] zero-padded, frames[b] real mel frames of clip b -> [sum of encoder_frames, output_dim],
    clip after clip: AudioEncoder.forward of each clip (windowed), concatenated. The windows are packed into rows
    as long as the longest (windows.py; share=False: a window a row)."""
    x = embed_chunks_batch(tower, mel, frames)
    windows = window_lengths(tower, frames)
    layout = WindowLayout.build(windows, max(windows), share=share)
    n = x.shape[0]
    src = layout.sources(torch.arange(n), zero=n).to(x.device)
    h = torch.cat([x, x.new_zeros(1, x.shape[1])]).index_select(0, src).view(layout.rows, layout.capacity, -1)
    mask = layout.mask().to(x.device)
    for layer in tower.layers:
        h = layer(h, mask)
    rows = torch.tensor(layout.slot_of_frame, device=x.device)
    return head(tower, h.view(-1, h.shape[-1]).index_select(0, rows))


def audio_slots(thinker: Thinker, prompts: list[list[int]]) -> int:
    """The prompts' <|audio_pad|> slots, counted on the host."""
    return sum(p.count(thinker.cfg.audio_token_id) for p in prompts)


def _embedded(thinker: Thinker, ids: torch.Tensor, slots_count: int, mel: torch.Tensor, frames: list[int],
              encoder: Encoder | None = None) -> torch.Tensor:
    """The decoder's input: ids' embeddings with every <|audio_pad|> slot replaced by its clip's encoder frame, in
    order (the slots of the clips in order, each clip's frames in order). `encoder` replays encode_batch from CUDA
    graphs where the call fits (encoder_graphs.py)."""
    mel = mel.to(thinker.lm_head.weight.dtype)
    audio = encode_batch(thinker.audio_tower, mel, frames) if encoder is None else encoder(mel, frames)
    x = thinker.model.embed_tokens(ids)
    slots = ids == thinker.cfg.audio_token_id
    if slots_count != audio.shape[0]:  # counted on the host: summing `slots` would wait for the encoder's kernels
        raise ValueError(f"prompts have {slots_count} audio slots for {audio.shape[0]} encoder frames")
    return x.masked_scatter(slots[..., None], audio.to(x.dtype))


def hidden_packed(thinker: Thinker, stack: FusedStack, prompts: list[list[int]], mel: torch.Tensor,
                  frames: list[int], captured: CapturedDecoder | None = None,
                  encoder: Encoder | None = None, prefill: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """B prompts and their clips' features -> (ids [N], the decoder's final hidden states [N, H]) for the N tokens
    of all prompts back to back; `stack` is FusedStack(thinker.model, ...); `captured` replays it from CUDA graphs
    where the call fits (decoder_graphs.py), `encoder` the audio encoder (encoder_graphs.py). `prefill`: attention
    a block of a prompt's tokens at a time (kernels/prefill_attention.py, Triton) instead of a token at a time."""
    device = thinker.lm_head.weight.device
    # Copied from pinned memory: a plain copy of a host list would wait for the features' (and, for `lengths`, the
    # encoder's) kernels before the host could queue the rest of the call, on a GPU the loop keeps busy.
    ids = to_device(torch.tensor([i for p in prompts for i in p]), device)
    lengths = to_device(torch.tensor([len(p) for p in prompts]), device)
    x = _embedded(thinker, ids, audio_slots(thinker, prompts), mel, frames, encoder)
    n = ids.shape[0]  # known on the host: repeat_interleave without it would read `lengths` back, a wait
    slots = torch.repeat_interleave(torch.arange(len(prompts), device=device), lengths, output_size=n)
    starts = torch.cumsum(lengths, 0) - lengths
    positions = torch.arange(n, device=device) - torch.repeat_interleave(starts, lengths, output_size=n)
    cfg, longest = thinker.model.cfg, max(map(len, prompts))
    if captured is not None and captured.fits(n, len(prompts), longest):
        return ids, captured(x, slots, positions, [len(p) for p in prompts])
    store = torch.empty((cfg.num_hidden_layers, 2, len(prompts), cfg.num_key_value_heads, longest, cfg.head_dim),
                        dtype=x.dtype, device=device)
    cos, sin = thinker.model.rope(0, longest, device, x.dtype)
    attend = None
    if prefill:
        from ...kernels.prefill_attention import block_table, prefill_attention

        table = to_device(block_table([len(p) for p in prompts]), device)

        def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return prefill_attention(q, k, v, table)

    return ids, stack.forward(x, list(store[:, 0]), list(store[:, 1]), slots, positions, cos, sin, attend=attend)


def hidden_batch(thinker: Thinker, prompts: list[list[int]], mel: torch.Tensor, frames: list[int],
                 pad_id: int, encoder: Encoder | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """B prompts (Aligner.prompt.ids of each clip) and their clips' features -> (ids [B, T] right-padded with
    pad_id, the decoder's final hidden states [B, T, H]); positions past a prompt's length are padding. `encoder`:
    as in hidden_packed."""
    cfg = thinker.cfg
    if pad_id in (cfg.audio_token_id, cfg.timestamp_token_id):
        raise ValueError(f"pad id {pad_id} is a slot token")
    t = max(map(len, prompts))
    ids = torch.tensor([p + [pad_id] * (t - len(p)) for p in prompts], device=thinker.lm_head.weight.device)
    # row-major slots: clip after clip, as the encoder's frames are
    x = _embedded(thinker, ids, audio_slots(thinker, prompts), mel, frames, encoder)
    cache = thinker.model.new_cache(len(prompts), t, x.dtype, x.device)
    return ids, thinker.model(x, cache)

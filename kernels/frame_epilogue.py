"""A decode step's last writes in one launch: each row's frame goes into its stream's ring, and the stream's next
Talker input, F(frame) + T(text id), into `next_input`. PyTorch spends ten launches on it (the index arithmetic,
the ring's scatter, the offsets' add, the joined tables' lookup, the sum, the text row's lookup, the add, the
scatter into next_input; with the text projected each step, its MLP's three more), all dependent and tiny.

Roundings are batch_step.py's: the frame's 16 rows summed in fp32 and rounded to the tables' dtype once (as
Talker.frame_embed's stacked sum), then the text row added in fp32 and rounded again (a 16-bit add). The summation
order inside the fp32 sum is the kernel's own (a tree), so a 16-bit result may differ from PyTorch's in its last bit
where two orders round apart; in fp32 the difference is the sum's own rounding. No host sync: capturable.

The text row comes from `text_table` [V, H] at `text_ids` [N]: every text id's projection computed once at load
(engine/qwen3tts/batch_step.py's `projected_text`), or this step's projected rows with ids 0..N-1.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from .utils import SUM, pdl_launch, wait_for_inputs

BLOCK_H = 256  # columns per program: the 1.7B's 2,048 in 8 programs a row, the 0.6B's 1,024 in 4


@triton.jit
def _frame_epilogue_kernel(frames_ptr, table_ptr, offsets_ptr, text_ptr, text_ids_ptr, slots_ptr, index_ptr,
                           ring_ptr, out_ptr, H, ring_len, Q: tl.constexpr, BLOCK_Q: tl.constexpr,
                           BLOCK_H: tl.constexpr, PDL: tl.constexpr):
    # frames [N, Q] int64; table [T, H]; offsets [Q] int64 (each codebook's first row of table); text [V, H];
    # text_ids, slots, index [N] int64; ring [S, ring_len, Q] int64; out [S, H]; all contiguous.
    # grid: (N, cdiv(H, BLOCK_H)); the first column block of a row also writes its ring entry.
    wait_for_inputs(PDL)
    row = tl.program_id(0).to(tl.int64)
    block = tl.program_id(1)
    q = tl.arange(0, BLOCK_Q)
    qm = q < Q
    codes = tl.load(frames_ptr + row * Q + q, mask=qm, other=0)
    slot = tl.load(slots_ptr + row)
    if block == 0:
        entry = tl.load(index_ptr + row) % ring_len
        tl.store(ring_ptr + (slot * ring_len + entry) * Q + q, codes, mask=qm)
    h = block * BLOCK_H + tl.arange(0, BLOCK_H)
    hm = h < H
    at = codes + tl.load(offsets_ptr + q, mask=qm, other=0)
    rows = tl.load(table_ptr + at[:, None] * H + h[None, :], mask=qm[:, None] & hm[None, :], other=0.0)
    dtype = out_ptr.dtype.element_ty
    frame = tl.reduce(rows.to(tl.float32), 0, SUM).to(dtype).to(tl.float32)
    text = tl.load(text_ptr + tl.load(text_ids_ptr + row) * H + h, mask=hm, other=0.0).to(tl.float32)
    tl.store(out_ptr + slot * H + h, (frame + text).to(dtype), mask=hm)


def _check(frames: torch.Tensor, table: torch.Tensor, offsets: torch.Tensor, text_table: torch.Tensor,
           text_ids: torch.Tensor, slots: torch.Tensor, frame_index: torch.Tensor, ring: torch.Tensor,
           next_input: torch.Tensor) -> None:
    rows, q = frames.shape
    assert frames.dtype == torch.int64 and frames.is_contiguous(), (frames.dtype, frames.stride())
    assert offsets.shape == (q,) and offsets.dtype == torch.int64, (offsets.shape, offsets.dtype)
    for ids in (text_ids, slots, frame_index):
        assert ids.shape == (rows,) and ids.dtype == torch.int64 and ids.is_contiguous(), (ids.shape, ids.dtype)
    assert ring.dim() == 3 and ring.shape[2] == q and ring.dtype == torch.int64 and ring.is_contiguous(), ring.shape
    width = next_input.shape[1]
    for t in (table, text_table, next_input):
        assert t.dim() == 2 and t.shape[1] == width and t.dtype == next_input.dtype and t.is_contiguous(), \
            (t.shape, t.dtype, next_input.shape, next_input.dtype)


def frame_epilogue(frames: torch.Tensor, table: torch.Tensor, offsets: torch.Tensor, text_table: torch.Tensor,
                   text_ids: torch.Tensor, slots: torch.Tensor, frame_index: torch.Tensor, ring: torch.Tensor,
                   next_input: torch.Tensor, pdl: bool | str = False) -> None:
    """For each row i: ring[slots[i], frame_index[i] % RING] = frames[i] and next_input[slots[i]] =
    sum_q table[frames[i, q] + offsets[q]] + text_table[text_ids[i]] (module docstring). frames [N, Q] int64;
    table [T, H], text_table [V, H] and next_input [S, H] of one dtype; offsets [Q]; text_ids, slots and frame_index
    [N] int64; ring [S, RING, Q] int64. No two rows may share a slot. `pdl`: launched with programmatic dependent
    launch (kernels/utils.py)."""
    _check(frames, table, offsets, text_table, text_ids, slots, frame_index, ring, next_input)
    rows, q = frames.shape
    width = next_input.shape[1]
    if rows == 0:
        return
    block = min(BLOCK_H, triton.next_power_of_2(width))
    on, extra = pdl_launch(_frame_epilogue_kernel, pdl)
    _frame_epilogue_kernel[(rows, triton.cdiv(width, block))](
        frames, table, offsets, text_table, text_ids, slots, frame_index, ring, next_input, width, ring.shape[1],
        Q=q, BLOCK_Q=triton.next_power_of_2(q), BLOCK_H=block, PDL=on, num_warps=4, **extra)


def frame_epilogue_ref(frames: torch.Tensor, table: torch.Tensor, offsets: torch.Tensor, text_table: torch.Tensor,
                       text_ids: torch.Tensor, slots: torch.Tensor, frame_index: torch.Tensor, ring: torch.Tensor,
                       next_input: torch.Tensor, pdl: bool | str = False) -> None:
    """The same in plain PyTorch: batch_step.py's ops (StepModel.frame_embed's lookup and sum)."""
    _check(frames, table, offsets, text_table, text_ids, slots, frame_index, ring, next_input)
    ring[slots, frame_index % ring.shape[1]] = frames
    frame = F.embedding(frames + offsets, table).sum(-2)
    next_input.index_copy_(0, slots, frame + F.embedding(text_ids, text_table))

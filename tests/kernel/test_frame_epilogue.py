"""kernels/frame_epilogue.py (a step's ring entry and next Talker input in one launch) against its PyTorch reference
on fresh random inputs (Triton's interpreter without a GPU, compiled on CUDA)."""

from __future__ import annotations

from types import ModuleType

import pytest
import torch

pytest.importorskip("triton")

from kernel_cases import DTYPES, ROWS, STEP_TOL
from triton_mode import DEVICE, kernel_module

Q = 16  # codebooks a frame
RING = 4


@pytest.fixture(scope="module")
def epi() -> ModuleType:
    return kernel_module("frame_epilogue")


def _case(rows: int, width: int, dtype: torch.dtype, whole: bool = False) -> dict[str, torch.Tensor]:
    """A step's inputs: `rows` streams in distinct slots of a pool with spare ones, codebooks of unequal sizes
    joined into one table, a text table; `whole`: every table value a small integer (every sum exact in 16 bits)."""
    sizes = torch.randint(3, 40, (Q,))
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), sizes.cumsum(0)[:-1]]).to(DEVICE)

    def values(*shape: int) -> torch.Tensor:
        t = torch.randint(-4, 5, shape) if whole else torch.randn(shape)
        return t.to(device=DEVICE, dtype=dtype)

    slots_total = rows + 5
    return dict(frames=(torch.rand(rows, Q) * sizes).long().to(DEVICE), table=values(int(sizes.sum()), width),
                offsets=offsets, text_table=values(50, width), text_ids=torch.randint(0, 50, (rows,), device=DEVICE),
                slots=torch.randperm(slots_total, device=DEVICE)[:rows],
                frame_index=torch.randint(0, 1000, (rows,), device=DEVICE),
                ring=torch.randint(0, 9, (slots_total, RING, Q), device=DEVICE),
                next_input=values(slots_total, width))


def _run(fn, case: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    ring, nxt = case["ring"].clone(), case["next_input"].clone()
    fn(**{**case, "ring": ring, "next_input": nxt})
    return ring, nxt


# 5: a column mask; 300: two column blocks, the second masked; the real widths only where compiled
WIDTHS = [5, 300] + ([1024, 2048] if DEVICE == "cuda" else [])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("width", WIDTHS)
def test_frame_epilogue(epi: ModuleType, dtype: torch.dtype, rows: int, width: int) -> None:
    """The ring entries equal the reference's exactly (every other entry untouched); next_input's written rows within
    the sum's rounding, the others untouched."""
    case = _case(rows, width, dtype)
    ring, nxt = _run(epi.frame_epilogue, case)
    want_ring, want = _run(epi.frame_epilogue_ref, case)
    assert torch.equal(ring, want_ring)
    assert not torch.equal(ring, case["ring"])
    torch.testing.assert_close(nxt.float(), want.float(), **STEP_TOL[dtype])
    others = torch.ones(nxt.shape[0], dtype=torch.bool, device=DEVICE)
    others[case["slots"]] = False
    assert torch.equal(nxt[others], case["next_input"][others])


@pytest.mark.parametrize("dtype", DTYPES)
def test_frame_epilogue_exact_where_sums_are(epi: ModuleType, dtype: torch.dtype) -> None:
    """Small whole numbers in every table: every partial sum is exact in bf16 too, so the kernel equals the
    reference to the last bit whatever order it sums in; and the reference equals the sum taken by hand."""
    case = _case(17, 300, dtype, whole=True)
    _, nxt = _run(epi.frame_epilogue, case)
    _, want = _run(epi.frame_epilogue_ref, case)
    assert torch.equal(nxt, want)
    table, frames = case["table"].double(), case["frames"]
    by_hand = sum(table[frames[:, q] + case["offsets"][q]] for q in range(Q)) + case["text_table"].double()[
        case["text_ids"]]
    assert torch.equal(want[case["slots"]].double(), by_hand)


def test_frame_epilogue_of_no_rows(epi: ModuleType) -> None:
    case = _case(0, 8, torch.float32)
    ring, nxt = _run(epi.frame_epilogue, case)
    assert torch.equal(ring, case["ring"]) and torch.equal(nxt, case["next_input"])

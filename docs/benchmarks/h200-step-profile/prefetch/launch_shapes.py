"""The persistent depth pass's launch shapes on the H200, one line each: the record of a run (`python launch_shapes.py`
with voxgate importable and CUDA present). It launches `_depth_pass_kernel` directly at the 1.7B predictor's shapes,
each shape first compiled and checked co-resident (a grid barrier over programs that cannot all run would hang),
then timed with Triton's do_bench_cudagraph; `phases 0` runs the 24 barriers alone."""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl
from voxgate.kernels import depth_pass as dp
from voxgate.kernels.bench import _randn

DEV = torch.device("cuda")
BF16 = torch.bfloat16
LAYERS, H, INNER, HEADS, KV_HEADS, D, POSITIONS, EPS = 5, 1024, 3072, 16, 8, 128, 16, 1e-6
NQKV = (HEADS + 2 * KV_HEADS) * D
SMS = torch.cuda.get_device_properties(DEV).multi_processor_count
# warps, programs per SM, tile columns (q|k|v, o and down, gate|up), K tile, prefetch, stages, phases
SHAPES = [
    (4, 1, 32, 16, 32, 128, True, 3, 0),
    (4, 1, 32, 16, 32, 128, True, 3, 31),
    (8, 1, 32, 16, 32, 128, True, 3, 31),
    (4, 2, 16, 16, 16, 128, True, 3, 31),
    (4, 1, 32, 16, 32, 128, True, 4, 31),
    (4, 1, 32, 16, 32, 256, True, 2, 31),
]
_fits: dict[tuple, bool] = {}


def _mat(n: int, k: int) -> torch.Tensor:
    return (torch.randn(LAYERS, n, k, device=DEV) / k**0.5).to(BF16)


NORM = (1 + 0.1 * torch.randn(LAYERS, H, device=DEV)).to(BF16)
WEIGHTS = (NORM, _mat(NQKV, H), _randn(DEV, LAYERS, D), _randn(DEV, LAYERS, D), _mat(H, HEADS * D), NORM.flip(0),
           _mat(2 * INNER, H), _mat(H, INNER))
_angles = torch.rand(POSITIONS, D, device=DEV) * 6.28
COS, SIN = _angles.cos().to(BF16), _angles.sin().to(BF16)
BAR = dp.barrier(DEV)


def launch(x: torch.Tensor, store: torch.Tensor, slots: torch.Tensor, pos: torch.Tensor, shape: tuple) -> torch.Tensor:
    warps, per_sm, bn_qkv, bn_h, bn_i, bk, prefetch, stages, phases = shape
    r = x.shape[0]
    out = torch.empty_like(x)
    work = [torch.empty((r, n), dtype=x.dtype, device=DEV) for n in (NQKV, HEADS * D, INNER)]
    units = [NQKV // bn_qkv, r * KV_HEADS, H // bn_h, INNER // bn_i, H // bn_h]
    args = (x, out, *work, *WEIGHTS, COS, SIN, pos, slots, store, BAR, *(store.stride(i) for i in range(5)), r, EPS,
            math.log2(math.e) / math.sqrt(D), 0, LAYERS, phases)
    consts = dict(H=H, INNER=INNER, HQ=HEADS, HKV=KV_HEADS, D=D, BLOCK_G=2, BLOCK_P=POSITIONS, BLOCK_M=16,
                  BN_QKV=bn_qkv, BN_H=bn_h, BN_I=bn_i, BK=bk, DOT_DTYPE=tl.bfloat16, PRECISION=None, SYNC=True,
                  num_warps=warps, num_stages=stages, LAYERS=LAYERS, PREFETCH=prefetch,
                  **dp._lines(2, H, HEADS * D, INNER))
    grid = (min(SMS * per_sm, max(units)) if phases else SMS * per_sm,)
    if shape not in _fits:
        kernel = dp._depth_pass_kernel.warmup(*args, grid=grid, **consts)
        kernel._init_handles()
        regs, shared = kernel.n_regs, kernel.metadata.shared
        _fits[shape] = regs * 32 * warps * per_sm <= 65536 and (shared + 1024) * per_sm <= 228 * 1024
        print(f"    compiled {shape}: {regs} regs, {shared} B shared, fits {_fits[shape]}", flush=True)
    if not _fits[shape]:
        raise RuntimeError("not co-resident")
    dp._depth_pass_kernel[grid](*args, **consts)
    return out


def main(shapes: list[tuple] = SHAPES) -> None:
    for rows in (1, 8):
        x, store = _randn(DEV, rows, H), _randn(DEV, LAYERS, 2, rows, KV_HEADS, POSITIONS, D)
        slots, pos = torch.arange(rows, device=DEV), torch.full((rows,), 8, device=DEV)
        want = dp.depth_pass_ref(x, WEIGHTS, store.clone(), slots, pos, COS, SIN, HEADS, KV_HEADS, EPS)
        for shape in shapes:
            try:
                err = (launch(x, store.clone(), slots, pos, shape).float() - want.float()).abs().max().item()
                work_store = store.clone()
                us = triton.testing.do_bench_cudagraph(
                    lambda x=x, s=work_store, slots=slots, pos=pos, shape=shape: launch(x, s, slots, pos, shape)) * 1e3
            except RuntimeError as exc:
                print(f"rows {rows} {shape}: failed {exc}", flush=True)
                continue
            warps, per_sm, bn_qkv, bn_h, bn_i, bk, prefetch, stages, phases = shape
            print(f"rows {rows:2d} warps {warps} grid x{per_sm} bn {bn_qkv}/{bn_h}/{bn_i} bk {bk} prefetch "
                  f"{prefetch:d} stages {stages} phases {phases}: {us:7.1f} us  max err {err:.3g}  "
                  f"bar {int(BAR.item())}", flush=True)


if __name__ == "__main__":
    main()

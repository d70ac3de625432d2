"""A projection of a few rows with the RMSNorm before it and the op after it in the same launch: the code
predictor's depth loop runs 15 passes of 5 layers a frame at 1-128 rows, where every small kernel costs a few
microseconds of the GPU's time whatever its work, so a layer in 5 launches instead of ~11 is most of the win.

    out = epilogue(norm(x) @ W^T)        norm: RMSNorm with weight g, or none
    epilogue: none | + residual | SwiGLU (W holds gate rows then up rows: silu(x W_g^T) * (x W_u^T))

The norm's row scale comes from a pass of its own over each program's rows (sums of squares read once, before
the product's loop), never from the tiles the product loop pipelines. Roundings follow the unfused stack
(fused_stack.py: add_rms_norm, F.linear, F.silu, the residual add): the normalized value rounded to the storage
dtype, times g rounded; the product rounded; a residual added in fp32 and rounded; SiLU of the rounded gate
rounded, times the rounded up, rounded. With `out_float` the rounded product is returned as fp32 (the logits).
Shapes depend only on the row count: capturable in a CUDA graph.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from .utils import SUM, interpreted

NONE, RESIDUAL, SWIGLU = 0, 1, 2


@triton.jit
def _cp_linear_kernel(x_ptr, w_ptr, g_ptr, res_ptr, out_ptr, M, N, K, eps, half_rows,
                      HAS_NORM: tl.constexpr, EPILOGUE: tl.constexpr, OUT_F32: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      DOT_DTYPE: tl.constexpr, PRECISION: tl.constexpr):
    # x [M, K], w [N_w, K], res/out [M, N], all contiguous. SWIGLU: w rows n (gate) and half_rows + n (up).
    # grid: (cdiv(N, BLOCK_N), cdiv(M, BLOCK_M)).
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    dtype = x_ptr.dtype.element_ty
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    row_ok = rows < M
    col_ok = cols < N
    x_rows = x_ptr + rows[:, None].to(tl.int64) * K
    rstd = tl.full((BLOCK_M,), 1.0, tl.float32)
    if HAS_NORM:  # the row scale first, from whole rows
        squares = tl.full((BLOCK_M,), 0.0, tl.float32)
        for k0 in range(0, K, BLOCK_K):
            k_ok = (k0 + ks) < K
            a = tl.load(x_rows + k0 + ks[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0.0).to(tl.float32)
            squares += tl.reduce(a * a, 1, SUM)
        rstd = tl.rsqrt(squares / K + eps)
    acc = tl.full((BLOCK_M, BLOCK_N), 0.0, tl.float32)
    acc_up = tl.full((BLOCK_M, BLOCK_N), 0.0, tl.float32)
    w_rows = w_ptr + cols[:, None].to(tl.int64) * K
    for k0 in range(0, K, BLOCK_K):
        k_ok = (k0 + ks) < K
        a = tl.load(x_rows + k0 + ks[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0.0)
        if HAS_NORM:
            g = tl.load(g_ptr + k0 + ks, mask=k_ok, other=0.0).to(tl.float32)
            a = ((a.to(tl.float32) * rstd[:, None]).to(dtype).to(tl.float32) * g[None, :]).to(dtype)
        a = a.to(DOT_DTYPE)
        w_mask = col_ok[:, None] & k_ok[None, :]
        w = tl.load(w_rows + k0 + ks[None, :], mask=w_mask, other=0.0).to(DOT_DTYPE)
        acc += tl.dot(a, tl.trans(w), input_precision=PRECISION)
        if EPILOGUE == 2:
            w_up = tl.load(w_rows + half_rows * K + k0 + ks[None, :], mask=w_mask, other=0.0).to(DOT_DTYPE)
            acc_up += tl.dot(a, tl.trans(w_up), input_precision=PRECISION)
    y = acc.to(dtype).to(tl.float32)
    if EPILOGUE == 1:
        res = tl.load(res_ptr + rows[:, None].to(tl.int64) * N + cols[None, :],
                      mask=row_ok[:, None] & col_ok[None, :], other=0.0).to(tl.float32)
        y = (res + y).to(dtype).to(tl.float32)
    if EPILOGUE == 2:
        silu = (y / (1.0 + tl.exp(-y))).to(dtype).to(tl.float32)
        y = (silu * acc_up.to(dtype).to(tl.float32)).to(dtype).to(tl.float32)
    out = out_ptr + rows[:, None].to(tl.int64) * N + cols[None, :]
    if OUT_F32:
        tl.store(out, y, mask=row_ok[:, None] & col_ok[None, :])
    else:
        tl.store(out, y.to(dtype), mask=row_ok[:, None] & col_ok[None, :])


# The interpreter's bf16 dots are wrong (utils.interpreted): interpreted, they take the values upcast to fp32.
_DOT_UPCAST = interpreted(_cp_linear_kernel)


def tiles(rows: int, cols: int, swiglu: bool) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_K) for a launch. Rows: one tile up to 64 (the weights are read once per row tile);
    columns narrow enough for ~64-128 programs on the weights of the predictor (N = 1,024-4,096): the launch is
    bound by how fast its programs stream the weight matrix, and one program per SM streams too little. The shared
    memory of one stage (x tile + one or two weight tiles) stays under ~40 KB, so two or three stages fit a 99 KB
    GPU."""
    block_m = max(16, min(64, triton.next_power_of_2(rows)))
    block_n = 16 if cols <= 2048 else 32
    return block_m, block_n, 128 if not swiglu else 64


def _check(x: torch.Tensor, weight: torch.Tensor, norm: torch.Tensor | None, residual: torch.Tensor | None,
           epilogue: int) -> int:
    assert x.dim() == 2 and x.is_contiguous() and weight.is_contiguous(), (x.shape, x.stride(), weight.stride())
    assert weight.shape[1] == x.shape[1] and weight.dtype == x.dtype, (x.shape, weight.shape, weight.dtype)
    assert x.dtype in (torch.bfloat16, torch.float16, torch.float32), x.dtype
    n = weight.shape[0] // 2 if epilogue == SWIGLU else weight.shape[0]
    assert epilogue != SWIGLU or weight.shape[0] % 2 == 0, weight.shape
    assert norm is None or (norm.shape == (x.shape[1],) and norm.dtype == x.dtype), (norm, x.shape)
    assert (residual is not None) == (epilogue == RESIDUAL), epilogue
    assert residual is None or (residual.shape == (x.shape[0], n) and residual.dtype == x.dtype
                                and residual.is_contiguous()), (residual.shape, n)
    return n


def cp_linear(x: torch.Tensor, weight: torch.Tensor, norm: torch.Tensor | None = None, eps: float = 1e-6,
              residual: torch.Tensor | None = None, swiglu: bool = False, out_float: bool = False) -> torch.Tensor:
    """x [M, K], weight [N, K] (SwiGLU: [2I, K], gate rows then up rows), norm [K] or None, residual [M, N] ->
    [M, N] (SwiGLU: [M, I]) in x's dtype, or fp32 holding the rounded values with `out_float`."""
    epilogue = SWIGLU if swiglu else RESIDUAL if residual is not None else NONE
    n = _check(x, weight, norm, residual, epilogue)
    rows, k = x.shape
    out = torch.empty((rows, n), dtype=torch.float32 if out_float else x.dtype, device=x.device)
    if rows == 0:
        return out
    block_m, block_n, block_k = tiles(rows, n, swiglu)
    f32_dots = x.dtype == torch.float32 or _DOT_UPCAST
    grid = (triton.cdiv(n, block_n), triton.cdiv(rows, block_m))
    _cp_linear_kernel[grid](
        x, weight, norm if norm is not None else x, residual if residual is not None else x, out, rows, n, k, eps, n,
        HAS_NORM=norm is not None, EPILOGUE=epilogue, OUT_F32=out_float, BLOCK_M=block_m, BLOCK_N=block_n,
        BLOCK_K=block_k, DOT_DTYPE=tl.float32 if f32_dots else tl.bfloat16, PRECISION="ieee" if f32_dots else None,
        num_warps=4, num_stages=3)
    return out


def cp_linear_ref(x: torch.Tensor, weight: torch.Tensor, norm: torch.Tensor | None = None, eps: float = 1e-6,
                  residual: torch.Tensor | None = None, swiglu: bool = False, out_float: bool = False) -> torch.Tensor:
    """The same in plain PyTorch, as the unfused stack computes it (RMSNorm as layers.RMSNorm, F.linear, F.silu)."""
    epilogue = SWIGLU if swiglu else RESIDUAL if residual is not None else NONE
    n = _check(x, weight, norm, residual, epilogue)
    if norm is not None:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
        x = norm * (xf if x.dtype == torch.float32 else xf.to(x.dtype))
    y = F.linear(x, weight)
    if swiglu:
        y = F.silu(y[:, :n]) * y[:, n:]
    elif residual is not None:
        y = residual + y
    return y.float() if out_float else y

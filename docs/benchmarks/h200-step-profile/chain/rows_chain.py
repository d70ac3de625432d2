"""The code predictor's projections at 1-16 rows, as the depth loop runs them: chains of dependent launches replayed
from one CUDA graph, each launch reading its own weight (the chain's weights > 2x L2, so from HBM). Run it where
voxgate and CUDA are (`python rows_chain.py [--stack talker] [--rows 1,8] [--arms cuBLAS,engine]`); it prints
one table, the record of a run.

Each arm's output is first checked on fresh inputs against fp32 F.linear (a cell says "wrong by ..." where it
differs by more than bf16's roundings). Per row count, us a launch (and the weights' read rate) for each
projection alone (a chain of that shape) and for a whole layer (q|k|v, o added into the residual, gate|up with
SwiGLU, down added: the predictor's 30 MiB, or the Talker's 96 MiB with `--stack talker`), by:

- `cuBLAS`: F.linear / addmm_ (gate|up then PyTorch's SiLU and product), what `small_gemm = cublas` runs;
- `engine`: the engine's routing with PDL (`small_gemm = gemv_all`, `gemv_rows = 16`: kernels/gemv.py where
  `fast` says so, cuBLAS elsewhere);
- `lanes`: the same with `gemv_layout = lanes` (kernels/gemv.py's lanes kernel where it fits, a warp a column's
  whole row; the engine's routing elsewhere);
- `rows kernel`: kernels/gemv.py's 2-16-row MMA kernel on every projection (its `fast` ceiling lifted), with PDL;
- `one chain`: the same kernel with the whole K in one MMA chain a warp (`MMA_PARTS_A_WARP = 0`, the form
  measured on 2026-12-06: every warp ran the tile's whole K);
- `split V`: the rows kernel on every projection with K cut across programs wherever a program's whole rows hold
  more than V weight values (`MMA_SPLIT_ABOVE = V`: split-K, each part's sums added in order by the last program);
- `cols C` or `split V cols C`: the same with C output columns a program (`MMA_COLUMNS = C`, 16 as shipped): fewer
  programs, each reading x's rows once for more columns.
- `dot BN BK S [pf] [late] [wW] [t]`: dot_loop.py's K loop of tensor-core dots (BN columns a program, K tiles of BK
  through S pipeline stages in shared memory, W warps, 4 by default), with PDL; `pf`: each program's weight rows
  sent toward L2 before its wait; `late`: PDL's one-kernel lookahead (wait, then release the next launch); `t`:
  the weight tile as the MMA's first operand (out^T = w @ x^T, as kernels/gemv.py's rows kernel).
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from chain import _graph_us as _replay_us  # chain.py beside this file: one graph of the chain, us a launch
from dot_loop import dot_loop  # beside this file: the K-looped candidate
from voxgate.kernels import gemv as g
from voxgate.kernels.utils import pdl_available

# (K, N) and whether W is gate|up (N its output columns, 2N rows); the 1.7B code predictor
PREDICTOR = {"qkv": (1024, 4096, False), "o": (2048, 1024, False), "gate_up": (1024, 3072, True),
             "down": (3072, 1024, False)}
TALKER = {"qkv": (2048, 4096, False), "o": (2048, 2048, False), "gate_up": (2048, 6144, True),
          "down": (6144, 2048, False)}
SHAPES = PREDICTOR
ROWS = (1, 2, 4, 8, 16)


def _graph_us(body, count: int) -> float | None:
    try:
        return _replay_us(body, count)
    except Exception as exc:  # a launch that does not compile or fit: the table says so, the rest still runs
        print(f"<!-- failed: {type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''} -->")
        torch.cuda.synchronize()
        return None


def _cell(us: float | None, nbytes: int, bold: bool = False) -> str:
    if us is None:
        return "failed"
    t = f"**{us:.2f}**" if bold else f"{us:.2f}"
    return f"{t} ({nbytes / us / 1e6:.2f})"


def _weights(dev: torch.device, k: int, n: int, pair: bool, count: int) -> list[torch.Tensor]:
    rows = 2 * n if pair else n
    return [(torch.randn(rows, k, device=dev) / k**0.5).to(torch.bfloat16) for _ in range(count)]


def _call(arm: str, name: str, x: torch.Tensor, w: torch.Tensor, res: torch.Tensor | None,
          pdl: bool) -> torch.Tensor:
    k, n, pair = SHAPES[name]
    rows = x.shape[0]
    if arm.startswith("dot "):
        words = arm.split()
        warps = next((int(word[1:]) for word in words if word.startswith("w")), 4)
        return dot_loop(x, w, res, pair, pdl=("late" if "late" in words else True) if pdl else False,
                        prefetch="pf" in words, block_n=int(words[1]), block_k=int(words[2]), stages=int(words[3]),
                        warps=warps, w_first="t" in words)
    lanes = arm == "lanes"
    if arm == "cuBLAS" or (arm in ("engine", "lanes") and rows > 1 and not g.fast(rows, n, k, pair, lanes=lanes)):
        if pair:
            gate, up = F.linear(x, w).chunk(2, dim=-1)
            return F.silu(gate) * up
        return res.addmm_(x, w.t()) if res is not None else F.linear(x, w)
    if pair:
        return g.gemv_swiglu(x, w, pdl=pdl, lanes=lanes)
    return g.gemv_add_(res, x, w, pdl=pdl, lanes=lanes) if res is not None else g.gemv(x, w, pdl=pdl, lanes=lanes)


def _wrong(arm: str, name: str, rows: int, dev: torch.device, pdl: bool) -> str | None:
    """None where the arm's output on fresh inputs matches fp32 F.linear (plus the residual; SwiGLU after it)
    within bf16's roundings (one; four with SwiGLU), else the largest difference."""
    k, n, pair = SHAPES[name]
    x = (torch.randn(rows, k, device=dev) / 2).to(torch.bfloat16)
    w = _weights(dev, k, n, pair, 1)[0]
    res = torch.randn(rows, n, device=dev).to(torch.bfloat16) if name in ("o", "down") else None
    want = F.linear(x.float(), w.float())
    if pair:
        gate, up = want.chunk(2, dim=-1)
        want = F.silu(gate) * up
    if res is not None:
        want = want + res.float()
    got = _call(arm, name, x, w, None if res is None else res.clone(), pdl).float()
    tol = 4 * 2**-7 if pair else 2e-2
    return None if torch.allclose(got, want, rtol=tol, atol=tol) else f"wrong by {(got - want).abs().max():.3g}"


def _rows_arm(arm: str) -> bool:
    return arm in ("rows kernel", "one chain") or arm.startswith(("split ", "cols "))


def _arm(arm: str) -> None:
    """The module's rule for the arm (the rows kernel everywhere, in one chain a warp, split, wider), or as
    shipped."""
    words = arm.split()
    g.MMA_MAX_VALUES = 1 << 20 if _rows_arm(arm) else SHIPPED["MMA_MAX_VALUES"]
    g.MMA_PARTS_A_WARP = 0 if arm == "one chain" else SHIPPED["MMA_PARTS_A_WARP"]
    g.MMA_SPLIT_ABOVE = int(words[1]) if words[0] == "split" else SHIPPED["MMA_SPLIT_ABOVE"]
    g.MMA_COLUMNS = int(words[words.index("cols") + 1]) if "cols" in words else SHIPPED["MMA_COLUMNS"]


SHIPPED = {name: getattr(g, name) for name in ("MMA_MAX_VALUES", "MMA_PARTS_A_WARP", "MMA_SPLIT_ABOVE",
                                               "MMA_COLUMNS")}


def main() -> None:
    global SHAPES
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", choices=("predictor", "talker"), default="predictor")
    parser.add_argument("--rows", default=",".join(map(str, ROWS)), help="comma-separated row counts")
    parser.add_argument("--arms", default="cuBLAS,engine,rows kernel,one chain", help="comma-separated arms")
    args = parser.parse_args()
    SHAPES = PREDICTOR if args.stack == "predictor" else TALKER
    arms = tuple(args.arms.split(","))
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    l2 = getattr(props, "L2_cache_size", 50 << 20)
    pdl = pdl_available(dev)
    layer_bytes = sum(2 * k * n * (2 if pair else 1) for k, n, pair in SHAPES.values())
    layers = max(8, int(2.2 * l2 / layer_bytes) + 1)
    weights = {name: _weights(dev, k, n, pair, layers) for name, (k, n, pair) in SHAPES.items()}
    print(f"{args.stack}: {props.name}, L2 {l2 >> 20} MiB, {props.multi_processor_count} SMs, PDL {pdl}; us a "
          f"launch in chains of {layers} per projection, us a layer ({layer_bytes / 2**20:.1f} MiB) in a chain of "
          f"{layers} layers; (TB/s of weights)\n")
    print("| rows | projection | " + " | ".join(arms) + " |")
    print("|---:|---|" + "---:|" * len(arms))
    nbytes = {name: 2 * k * n * (2 if pair else 1) for name, (k, n, pair) in SHAPES.items()}
    for rows in map(int, args.rows.split(",")):
        xs = {name: (torch.randn(rows, k, device=dev) / 2).to(torch.bfloat16) for name, (k, _, _) in SHAPES.items()}
        res = {name: torch.zeros(rows, n, device=dev, dtype=torch.bfloat16) if name in ("o", "down") else None
               for name, (_, n, _) in SHAPES.items()}
        cells: dict[str, list[str]] = {name: [] for name in (*SHAPES, "layer")}
        for arm in arms:
            if rows == 1 and _rows_arm(arm):  # one row takes the one-row kernel in every arm
                for row in cells.values():
                    row.append("-")
                continue
            _arm(arm)
            us = _time_arm(arm, xs, res, weights, layers, pdl)
            for name in SHAPES:
                wrong = _wrong(arm, name, rows, dev, pdl)
                cells[name].append(wrong or _cell(us[name], nbytes[name]))
            cells["layer"].append(_cell(us["layer"], layer_bytes, bold=True))
        _arm("engine")
        for name, row in cells.items():
            print(f"| {rows} | {name} | " + " | ".join(row) + " |", flush=True)


def _time_arm(arm: str, xs: dict, res: dict, weights: dict, layers: int, pdl: bool) -> dict[str, float | None]:
    """us a launch of each projection's chain, and a layer's in the chain of layers, for one arm."""
    def one(name: str):
        def chain() -> None:
            for w in weights[name]:
                _call(arm, name, xs[name], w, res[name], pdl)
        return chain

    def layer_chain() -> None:
        for i in range(layers):
            for name in SHAPES:
                _call(arm, name, xs[name], weights[name][i], res[name], pdl)
    us = {name: _graph_us(one(name), layers) for name in SHAPES}
    us["layer"] = _graph_us(layer_chain, layers)
    return us

if __name__ == "__main__":
    main()

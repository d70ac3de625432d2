"""The code predictor's 15 passes over its 5 layers with part of its weights kept in L2 (CUDA's persisting L2 lines:
an access-policy window on the capturing stream, cudaLimitPersistingL2CacheSize set aside): does reading a quarter
of the predictor's bytes from L2 on every pass shorten a depth loop that is bound by its dependent launches?
Run it where voxgate and CUDA are (`python l2_persist.py [--rows 1,8]`); it prints one table, the record of a run.

The weights live in one arena, laid out [o x 5][down x 5][q|k|v x 5][gate|up x 5] (bf16, the 1.7B's predictor:
150 MiB), and one CUDA graph replays 15 passes x 5 layers of kernels/gemv.py's projections with PDL (q|k|v, o added
into the residual, gate|up with SwiGLU, down added), as the engine's `small_gemm = gemv_all` runs them. Arms:

- `none`: no window (every pass streams 150 MiB from HBM through a 50 MiB L2);
- `all`: a window over the whole arena (or the longest window the GPU takes) with hitRatio = set-aside / window;
- `o+down`: the arena's first set-aside bytes (the 5 layers' o, then their down) persisting, hitRatio 1;
- `o`: the 5 layers' o only (20 MiB), hitRatio 1.

Each window arm runs twice: set on the capturing stream (`stream`: whether capture carries it into the kernel
nodes is the question), and set on every kernel node of the captured graph before it is instantiated (`nodes`:
cudaGraphKernelNodeSetAttribute, the documented way for graphs).

Expected, if a pass-layer is its bytes at ~1.7 TB/s plus a fixed latency a launch: `o+down` saves ~37 MB a pass of
~150 (~20 % of the loop's read time, less the launches' fixed part).
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import os

import torch
import triton
from voxgate.kernels import gemv as g
from voxgate.kernels.utils import pdl_available

LAYERS, PASSES = 5, 15
SHAPES = {"o": (2048, 1024, False), "down": (3072, 1024, False), "qkv": (1024, 4096, False),
          "gate_up": (1024, 3072, True)}  # (K, N, gate|up pair)
ORDER = ("o", "down", "qkv", "gate_up")


class _Window(ctypes.Structure):
    _fields_ = [("base_ptr", ctypes.c_void_p), ("num_bytes", ctypes.c_size_t), ("hitRatio", ctypes.c_float),
                ("hitProp", ctypes.c_int), ("missProp", ctypes.c_int)]


class _AttrValue(ctypes.Union):  # cudaLaunchAttributeValue: 64 bytes, the window its first member
    _fields_ = [("accessPolicyWindow", _Window), ("pad", ctypes.c_char * 64)]


def _cudart() -> ctypes.CDLL:
    names = ["libcudart.so", "libcudart.so.13", "libcudart.so.12"]
    base = os.path.dirname(torch.__file__)
    names += sorted(glob.glob(os.path.join(base, "..", "nvidia", "*", "lib", "libcudart.so*")))
    names += sorted(glob.glob(os.path.join(base, "lib", "libcudart*.so*")))
    for name in names:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    raise OSError("no libcudart found")


RT = _cudart()
PERSISTING, STREAMING = 2, 1  # cudaAccessProperty
LIMIT_PERSISTING_L2 = 0x06  # cudaLimitPersistingL2CacheSize
ATTR_WINDOW = 1  # cudaLaunchAttributeAccessPolicyWindow (= cudaStreamAttributeAccessPolicyWindow)


def _check(code: int, what: str) -> None:
    if code != 0:
        raise RuntimeError(f"{what}: cudaError {code}")


def _attribute(attr: int) -> int:
    value = ctypes.c_int()
    _check(RT.cudaDeviceGetAttribute(ctypes.byref(value), attr, torch.cuda.current_device()), f"attribute {attr}")
    return value.value


def _set_window(stream: torch.cuda.Stream, base: int, nbytes: int, hit: float) -> None:
    value = _AttrValue()
    value.accessPolicyWindow = _Window(base, nbytes, hit, PERSISTING if nbytes else 0, STREAMING if nbytes else 0)
    _check(RT.cudaStreamSetAttribute(ctypes.c_void_p(stream.cuda_stream), ATTR_WINDOW, ctypes.byref(value)),
           "cudaStreamSetAttribute")


def _window_nodes(graph: torch.cuda.CUDAGraph, base: int, nbytes: int, hit: float) -> int:
    """The window on every kernel node of a graph captured with keep_graph=True; the nodes set."""
    raw = ctypes.c_void_p(graph.raw_cuda_graph())
    count = ctypes.c_size_t(0)
    _check(RT.cudaGraphGetNodes(raw, None, ctypes.byref(count)), "cudaGraphGetNodes")
    nodes = (ctypes.c_void_p * count.value)()
    _check(RT.cudaGraphGetNodes(raw, nodes, ctypes.byref(count)), "cudaGraphGetNodes")
    value = _AttrValue()
    value.accessPolicyWindow = _Window(base, nbytes, hit, PERSISTING, STREAMING)
    done = 0
    for node in nodes:
        kind = ctypes.c_int()
        _check(RT.cudaGraphNodeGetType(ctypes.c_void_p(node), ctypes.byref(kind)), "cudaGraphNodeGetType")
        if kind.value == 0:  # cudaGraphNodeTypeKernel
            _check(RT.cudaGraphKernelNodeSetAttribute(ctypes.c_void_p(node), ATTR_WINDOW, ctypes.byref(value)),
                   "cudaGraphKernelNodeSetAttribute")
            done += 1
    return done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="1,8")
    args = parser.parse_args()
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    max_persist, max_window = _attribute(108), _attribute(109)  # cudaDevAttrMaxPersistingL2CacheSize, ...WindowSize
    _check(RT.cudaDeviceSetLimit(LIMIT_PERSISTING_L2, ctypes.c_size_t(max_persist)), "cudaDeviceSetLimit")
    pdl = pdl_available(dev)
    sizes = {name: (2 if pair else 1) * n * k for name, (k, n, pair) in SHAPES.items()}
    arena = torch.empty(LAYERS * sum(sizes.values()), dtype=torch.bfloat16, device=dev)
    weights: dict[str, list[torch.Tensor]] = {}
    at = 0
    for name in ORDER:
        k, n, pair = SHAPES[name]
        weights[name] = []
        for _ in range(LAYERS):
            w = arena[at:at + sizes[name]].view((2 if pair else 1) * n, k)
            w.copy_(torch.randn_like(w, dtype=torch.float32) / k**0.5)
            weights[name].append(w)
            at += sizes[name]
    total = arena.numel() * 2
    base = arena.data_ptr()
    o_bytes = LAYERS * sizes["o"] * 2
    arms = {"none": (0, 0.0), "all": (min(total, max_window), min(1.0, max_persist / min(total, max_window))),
            "o+down": (min(max_persist, max_window), 1.0), "o": (min(o_bytes, max_persist, max_window), 1.0)}
    print(f"{props.name}, L2 {props.L2_cache_size >> 20} MiB, persisting at most {max_persist / 2**20:.1f} MiB, "
          f"window at most {max_window / 2**20:.1f} MiB, PDL {pdl}; the predictor's arena {total / 2**20:.0f} MiB; "
          f"us a pass-layer (4 projections) in one graph of {PASSES} x {LAYERS}\n")
    heads = [f"{arm} ({nbytes / 2**20:.1f} MiB, hit {hit:.2f}){' ' + how if nbytes else ''}"
             for arm, (nbytes, hit) in arms.items() for how in ("stream", "nodes") if nbytes or how == "stream"]
    print("| rows | " + " | ".join(heads) + " |")
    print("|---:|" + "---:|" * len(heads))
    for rows in map(int, args.rows.split(",")):
        x = {name: (torch.randn(rows, k, device=dev) / 2).to(torch.bfloat16) for name, (k, _, _) in SHAPES.items()}
        res = {name: torch.zeros(rows, n, device=dev, dtype=torch.bfloat16) for name, (_, n, _) in SHAPES.items()}

        def loop(x: dict = x, res: dict = res) -> None:
            for _ in range(PASSES):
                for i in range(LAYERS):
                    g.gemv(x["qkv"], weights["qkv"][i], pdl=pdl)
                    g.gemv_add_(res["o"], x["o"], weights["o"][i], pdl=pdl)
                    g.gemv_swiglu(x["gate_up"], weights["gate_up"][i], pdl=pdl)
                    g.gemv_add_(res["down"], x["down"], weights["down"][i], pdl=pdl)
        cells = []
        for nbytes, hit in arms.values():
            for how in ("stream", "nodes") if nbytes else ("stream",):
                _check(RT.cudaCtxResetPersistingL2Cache(), "cudaCtxResetPersistingL2Cache")
                side = torch.cuda.Stream()
                _set_window(side, base, nbytes if how == "stream" else 0, hit)
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    loop()  # compiled and warm outside the capture
                torch.cuda.synchronize()
                try:
                    graph = torch.cuda.CUDAGraph(keep_graph=how == "nodes")
                    with torch.cuda.graph(graph, stream=side):
                        loop()
                    if how == "nodes":
                        _window_nodes(graph, base, nbytes, hit)
                        graph.instantiate()
                    ms = triton.testing.do_bench(graph.replay, warmup=20, rep=200)
                    cells.append(f"{ms * 1e3 / (PASSES * LAYERS):.2f}")
                except Exception as exc:  # a torch without keep_graph, or a driver refusing the attribute
                    print(f"<!-- {how} failed: {type(exc).__name__}: {str(exc).splitlines()[0][:160]} -->")
                    cells.append("failed")
        print(f"| {rows} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()

"""The probe's second form, after the first found that a graph captured on a plain stream runs on every SM when
replayed on an SM-limited one: graphs captured on the limited stream itself, and a flood of eager GEMMs. Run:
    PYTHONPATH=/tmp/site-gw:/tmp/vx python3 docs/benchmarks/h200-word-times/green-1207r/probe2.py
1. a 4096-cubed bf16 GEMM on streams of N SMs: eager, and a graph captured on that stream replayed there
2. the chain of 400 dependent 8 x 2048 x 2048 GEMMs (a graph on a plain stream) beside a flood of eager GEMMs on a
   plain stream and on limited ones, then beside a flood of graphs captured on the limited streams
"""

import time

import torch
from voxgate.engine.sm_stream import device_sms, sm_limited_stream

dev = torch.device("cuda")
total = device_sms(dev)
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.get_device_name(dev)}, {total} SMs")
a = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
b = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
out = torch.empty_like(a)


def gemm() -> None:
    torch.mm(a, b, out=out)


def graph_on(stream: torch.cuda.Stream, fn) -> torch.cuda.CUDAGraph:
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=stream):
        fn()
    return g


def ms(stream: torch.cuda.Stream, fn, reps: int = 20) -> float:
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            fn()
        end.record()
    end.synchronize()
    return start.elapsed_time(end) / reps


streams = {"plain": (torch.cuda.Stream(), None)}
for n in (16, 32, 66):
    streams[f"{n} SMs"] = sm_limited_stream(dev, n)
graphs = {}
print("\n1. a 4096^3 bf16 GEMM, ms: stream | eager | graph captured there, replayed there")
for name, (stream, _) in streams.items():
    try:
        graphs[name] = graph_on(stream, gemm)
        replay = f"{ms(stream, graphs[name].replay):7.3f}"
    except Exception as exc:  # a probe: say what failed and go on
        replay = f"{type(exc).__name__}: {exc}"[:120]
    print(f"{name:>8} | {ms(stream, gemm):7.3f} | {replay}")

w = torch.randn(2048, 2048, device=dev, dtype=torch.bfloat16) / 45
x0 = torch.randn(8, 2048, device=dev, dtype=torch.bfloat16)
chain_out = torch.empty_like(x0)


def chain() -> None:
    x = x0
    for _ in range(400):
        x = x @ w
    chain_out.copy_(x)


main = torch.cuda.Stream()
chain_graph = graph_on(main, chain)
alone = ms(main, chain_graph.replay, reps=10)
print(f"\n2. the chain alone {alone:.3f} ms; beside a flood (eager GEMMs, or graphs captured on the flood's stream)")
print("flood on | flood of | chain ms | x alone | flood GEMMs a ms")
for name, (stream, _) in streams.items():
    for kind in ("eager", "graph"):
        if kind == "graph" and name not in graphs:
            continue
        fn = gemm if kind == "eager" else graphs[name].replay
        flood = 200 if name == "plain" else 100
        stream.wait_stream(torch.cuda.current_stream())
        main.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            f0, f1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            f0.record()
            for _ in range(flood):
                fn()
            f1.record()
        time.sleep(0.002)
        with torch.cuda.stream(main):
            c0, c1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            c0.record()
            for _ in range(3):
                chain_graph.replay()
            c1.record()
        torch.cuda.synchronize()
        chain_ms = c0.elapsed_time(c1) / 3
        print(f"{name:>8} | {kind:>8} | {chain_ms:8.3f} | {chain_ms / alone:7.2f} | {flood / f0.elapsed_time(f1):8.3f}")

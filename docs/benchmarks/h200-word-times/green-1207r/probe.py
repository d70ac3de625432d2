"""Does an SM-limited stream (engine/sm_stream.py, a CUDA green context) keep a neighbour's big GEMMs off the SMs
that a chain of small, dependent kernels (the loop's step, latency-bound) needs? Run on a GPU host:
    PYTHONPATH=/tmp/site-gw:/tmp/vx python3 docs/benchmarks/h200-word-times/green-1207r/probe.py
1. a 4096-cubed bf16 GEMM alone on streams of N SMs, eager and as a graph captured on a plain stream and replayed
   on the limited one: if the limit holds, its time grows ~ total / N (for graphs too)
2. the chain (CHAIN GEMVs of 8 rows by 2,048 by 2,048, each on the last one's output, as a graph) alone, then beside
   a flood of 4096-cubed GEMMs on a plain stream and on streams of N SMs: the chain's time and the flood's GEMMs a ms
"""

import time

import torch
from voxgate.engine.sm_stream import device_sms, sm_limited_stream

CHAIN = 400
dev = torch.device("cuda")
total = device_sms(dev)
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.get_device_name(dev)}, {total} SMs")
big_a = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
big_b = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
big_out = torch.empty_like(big_a)


def graph_of(fn) -> torch.cuda.CUDAGraph:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g


def gemm() -> None:
    torch.mm(big_a, big_b, out=big_out)


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


gemm_graph = graph_of(gemm)
streams = {"plain": (torch.cuda.Stream(), None)}
for n in (8, 16, 24, 32, 48, 66):
    if n < total:
        try:
            streams[f"{n} SMs"] = sm_limited_stream(dev, n)
        except Exception as exc:  # a probe: say what failed and go on
            print(f"{n} SMs: {type(exc).__name__}: {exc}")
print("\n1. a 4096^3 bf16 GEMM alone, ms: stream | eager | graph replayed there")
for name, (stream, _) in streams.items():
    print(f"{name:>8} | {ms(stream, gemm):7.3f} | {ms(stream, gemm_graph.replay):7.3f}")

w = torch.randn(2048, 2048, device=dev, dtype=torch.bfloat16) / 45
x0 = torch.randn(8, 2048, device=dev, dtype=torch.bfloat16)
chain_out = torch.empty_like(x0)


def chain() -> None:
    x = x0
    for _ in range(CHAIN):
        x = x @ w
    chain_out.copy_(x)


chain_graph = graph_of(chain)
main = torch.cuda.Stream()
alone = ms(main, chain_graph.replay, reps=10)
print(f"\n2. a chain of {CHAIN} dependent 8 x 2048 x 2048 GEMMs (a graph): alone {alone:.3f} ms "
      f"({1000 * alone / CHAIN:.2f} us a kernel)")
print("flood on | chain ms | x alone | flood GEMMs a ms")
for name, (stream, _) in streams.items():
    flood = 200
    stream.wait_stream(torch.cuda.current_stream())
    main.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        f0, f1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        f0.record()
        for _ in range(flood):
            gemm_graph.replay()
        f1.record()
    time.sleep(0.002)  # the flood's first GEMMs are on the SMs before the chain starts
    with torch.cuda.stream(main):
        c0, c1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        c0.record()
        for _ in range(3):
            chain_graph.replay()
        c1.record()
    torch.cuda.synchronize()
    chain_ms = c0.elapsed_time(c1) / 3
    print(f"{name:>8} | {chain_ms:8.3f} | {chain_ms / alone:7.2f} | {flood / f0.elapsed_time(f1):8.3f}")

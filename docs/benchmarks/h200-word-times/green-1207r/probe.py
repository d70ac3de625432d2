"""Does an SM-limited stream (engine/sm_stream.py, a CUDA green context) keep a neighbour's big GEMMs off the SMs
that a chain of small, dependent kernels (the loop's step, latency-bound) needs? Run on a GPU host:
    PYTHONPATH=/tmp/site-gw:/tmp/vx python3 docs/benchmarks/h200-word-times/green-1207r/probe.py
1. a 4096-cubed bf16 GEMM alone on streams of N SMs, eager and as a graph captured on a plain stream and replayed
   on the limited one: if the limit holds, its time grows ~ total / N (for graphs too)
2. the chain (CHAIN GEMVs of 8 rows by 2,048 by 2,048, each on the last one's output, as a graph) alone, then beside
   a flood of 4096-cubed GEMMs on a plain stream and on streams of N SMs: the chain's time and the flood's GEMMs a ms
"""

import torch
from probe_parts import CHAIN, beside_flood, big_gemm, chain, dev, device_line, graph_on, ms
from voxgate.engine.sm_stream import sm_limited_stream

total = device_line()
gemm = big_gemm()
gemm_graph = graph_on(None, gemm)
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

chain_graph = graph_on(None, chain())
main = torch.cuda.Stream()
alone = ms(main, chain_graph.replay, reps=10)
print(f"\n2. a chain of {CHAIN} dependent 8 x 2048 x 2048 GEMMs (a graph): alone {alone:.3f} ms "
      f"({1000 * alone / CHAIN:.2f} us a kernel)")
print("flood on | chain ms | x alone | flood GEMMs a ms")
for name, (stream, _) in streams.items():
    chain_ms, rate = beside_flood(chain_graph, main, stream, gemm_graph.replay, flood=200)
    print(f"{name:>8} | {chain_ms:8.3f} | {chain_ms / alone:7.2f} | {rate:8.3f}")

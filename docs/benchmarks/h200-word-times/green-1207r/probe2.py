"""The probe's second form, after the first found that a graph captured on a plain stream runs on every SM when
replayed on an SM-limited one: graphs captured on the limited stream itself, and a flood of eager GEMMs. Run:
    PYTHONPATH=/tmp/site-gw:/tmp/vx python3 docs/benchmarks/h200-word-times/green-1207r/probe2.py
1. a 4096-cubed bf16 GEMM on streams of N SMs: eager, and a graph captured on that stream replayed there
2. the chain of 400 dependent 8 x 2048 x 2048 GEMMs (a graph on a plain stream) beside a flood of eager GEMMs on a
   plain stream and on limited ones, then beside a flood of graphs captured on the limited streams
"""

import torch
from probe_parts import beside_flood, big_gemm, chain, dev, device_line, graph_on, ms
from voxgate.engine.sm_stream import sm_limited_stream

device_line()
gemm = big_gemm()
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

main = torch.cuda.Stream()
chain_graph = graph_on(main, chain())
alone = ms(main, chain_graph.replay, reps=10)
print(f"\n2. the chain alone {alone:.3f} ms; beside a flood (eager GEMMs, or graphs captured on the flood's stream)")
print("flood on | flood of | chain ms | x alone | flood GEMMs a ms")
for name, (stream, _) in streams.items():
    for kind in ("eager", "graph"):
        if kind == "graph" and name not in graphs:
            continue
        flood_fn = gemm if kind == "eager" else graphs[name].replay
        chain_ms, rate = beside_flood(chain_graph, main, stream, flood_fn, flood=200 if name == "plain" else 100)
        print(f"{name:>8} | {kind:>8} | {chain_ms:8.3f} | {chain_ms / alone:7.2f} | {rate:8.3f}")

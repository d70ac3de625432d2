"""What probe.py and probe2.py share: the device line, graphs, timing on a stream, the 4096-cubed GEMM, the chain of
small dependent GEMMs, and a flood beside the chain."""

import time
from collections.abc import Callable

import torch
from voxgate.engine.sm_stream import device_sms

CHAIN = 400
dev = torch.device("cuda")


def device_line() -> int:
    """Print the stack and the GPU; its SM count."""
    total = device_sms(dev)
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.get_device_name(dev)}, {total} SMs")
    return total


def graph_on(stream: torch.cuda.Stream | None, fn: Callable[[], object]) -> torch.cuda.CUDAGraph:
    """`fn` warmed once and captured as a graph on `stream` (None: on a plain stream of torch's)."""
    side = stream if stream is not None else torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=stream):
        fn()
    return g


def ms(stream: torch.cuda.Stream, fn: Callable[[], object], reps: int = 20) -> float:
    """GPU ms a run of `fn` on `stream`, after one untimed run."""
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


def big_gemm() -> Callable[[], None]:
    a, b = (torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16) for _ in range(2))
    out = torch.empty_like(a)
    return lambda: torch.mm(a, b, out=out)


def chain() -> Callable[[], None]:
    """CHAIN GEMMs of 8 x 2,048 x 2,048, each on the last one's output (a latency-bound step's shape)."""
    w = torch.randn(2048, 2048, device=dev, dtype=torch.bfloat16) / 45
    x0 = torch.randn(8, 2048, device=dev, dtype=torch.bfloat16)
    out = torch.empty_like(x0)

    def run() -> None:
        x = x0
        for _ in range(CHAIN):
            x = x @ w
        out.copy_(x)
    return run


def beside_flood(chain_graph: torch.cuda.CUDAGraph, main: torch.cuda.Stream, stream: torch.cuda.Stream,
                 flood_fn: Callable[[], object], flood: int) -> tuple[float, float]:
    """The chain's ms (3 replays on `main`) while `flood` runs of `flood_fn` queue on `stream`, and the flood's runs
    a ms."""
    stream.wait_stream(torch.cuda.current_stream())
    main.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        f0, f1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        f0.record()
        for _ in range(flood):
            flood_fn()
        f1.record()
    time.sleep(0.002)  # the flood's first GEMMs are on the SMs before the chain starts
    with torch.cuda.stream(main):
        c0, c1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        c0.record()
        for _ in range(3):
            chain_graph.replay()
        c1.record()
    torch.cuda.synchronize()
    return c0.elapsed_time(c1) / 3, flood / f0.elapsed_time(f1)

"""`voxgate bench parse`: the cost of turning one inbound WebSocket text frame into a typed message.

Every client message pays it on the event loop, so it is measured on its own: a fixed mix of the messages a
session sends (playback reports dominate in `client_clock` mode, text appends when an LLM streams words), each
parsed `--repeat` times; the best of `--rounds` rounds is reported per message type, in microseconds.
"""

from __future__ import annotations

import argparse
import json
import time

from voxgate.gateway.protocol import ProtocolError, parse_message

MIX: dict[str, str] = {
    "playback": json.dumps({"type": "playback", "track": 0, "played_pts": 123_456, "buffered_samples": 3600,
                            "underruns": {"events": 2, "samples": 960, "max_gap_ms": 12.5},
                            "output_latency_ms": 0, "t_ms": 1_234_567.891}),
    "text.append": json.dumps({"type": "text.append", "context_id": "turn-1", "text": "Hello there, how are "}),
    "context.open": json.dumps({"type": "context.open", "context_id": "turn-2", "voice": "en-us", "track": 0}),
    "ping": json.dumps({"type": "ping", "t_ms": 1_234_567.891}),
    "session.start": json.dumps({"type": "session.start", "protocol": "voxgate.v1", "audio": {"codec": "pcm_s16le"},
                                 "pacing": {"mode": "asap", "target_buffer_ms": 150, "max_buffer_ms": 1000}}),
    "invalid (wrong type)": json.dumps({"type": "text.append", "context_id": "turn-1", "text": 5}),
}


def measure(repeat: int, rounds: int) -> dict[str, float]:
    """Best-of-rounds microseconds per parse, by message."""
    out: dict[str, float] = {}
    for name, raw in MIX.items():
        best = float("inf")
        for _ in range(rounds):
            t0 = time.perf_counter()
            for _ in range(repeat):
                try:
                    parse_message(raw)
                except ProtocolError:
                    pass
            best = min(best, (time.perf_counter() - t0) / repeat)
        out[name] = best * 1e6
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repeat", type=int, default=20_000, help="parses per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds; the best is reported")


def parse_main(args: argparse.Namespace) -> int:
    results = measure(args.repeat, args.rounds)
    width = max(map(len, results))
    for name, us in results.items():
        print(f"{name:<{width}}  {us:7.2f} us")
    print(f"{'mean':<{width}}  {sum(results.values()) / len(results):7.2f} us")
    return 0

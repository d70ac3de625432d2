"""Time to first byte of POST /v1/audio/speech per response format (issue 14: streamed formats within 5 ms of PCM).

Starts `voxgate serve` (espeak) on 127.0.0.1 as its own process, then sends the same sentence N times per
format, formats interleaved, one request at a time, streamed (`stream_format: audio`, and `sse`); first byte =
the first body chunk's arrival.
Also reports the server's event-loop lag over the run.

    OMP_NUM_THREADS=1 .venv/bin/python tests/bench/speech_ttfb.py --n 40
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/, for support.py (run as a script)
from support import serve_process

FORMATS = ["pcm", "wav", "mp3", "opus", "aac", "flac"]


def first_byte_ms(client: httpx.Client, body: dict) -> tuple[float, float, int]:
    t0 = time.perf_counter()
    first, total = None, 0
    with client.stream("POST", "/v1/audio/speech", json=body) as response:
        response.raise_for_status()
        for chunk in response.iter_raw():
            if first is None and chunk:
                first = time.perf_counter()
            total += len(chunk)
    return (first - t0) * 1000, (time.perf_counter() - t0) * 1000, total


@contextlib.contextmanager
def served(encoder_threads: int) -> Iterator[str]:
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "bench.toml"
        config.write_text(f"serve_demo = false\nspeech_encoder_threads = {encoder_threads}\n")
        with serve_process(Path(tmp) / "serve.log", config=config, env={**os.environ, "OMP_NUM_THREADS": "1"},
                           grace_s=15) as server:
            yield server.http_url


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=40)
    parser.add_argument("--text", default="Hello there. This sentence measures the first byte of each format.")
    parser.add_argument("--encoder-threads", type=int, default=2)
    args = parser.parse_args()
    with served(args.encoder_threads) as url, httpx.Client(base_url=url, timeout=30) as client:
        results: dict[str, list[float]] = {}
        totals: dict[str, list[float]] = {}
        for i in range(args.n + 3):  # 3 warm-up rounds, not counted
            for stream_format in ("audio", "sse"):
                for fmt in FORMATS:
                    key = f"{fmt}/{stream_format}"
                    body = {"input": args.text, "voice": "en-us", "response_format": fmt,
                            "stream_format": stream_format}
                    ttfb, total_ms, _ = first_byte_ms(client, body)
                    if i >= 3:
                        results.setdefault(key, []).append(ttfb)
                        totals.setdefault(key, []).append(total_ms)
        lag = client.get("/metrics").text
    base = statistics.median(results["pcm/audio"])
    print(f"{'format':<12} {'ttfb p50':>9} {'p90':>7} {'vs pcm':>7} {'whole p50':>10}   (ms, n={args.n})")
    for key, values in results.items():
        values.sort()
        p50, p90 = statistics.median(values), values[int(0.9 * (len(values) - 1))]
        print(f"{key:<12} {p50:9.2f} {p90:7.2f} {p50 - base:+7.2f} {statistics.median(totals[key]):10.2f}")
    lines = dict(line.rsplit(" ", 1) for line in lag.splitlines() if line.startswith("voxgate_event_loop_lag_seconds"))
    count = float(lines["voxgate_event_loop_lag_seconds_count"])
    over = count - float(lines.get('voxgate_event_loop_lag_seconds_bucket{le="0.005"}', count))
    print(f"event loop lag: mean {float(lines['voxgate_event_loop_lag_seconds_sum']) / count * 1000:.2f} ms over "
          f"{count:.0f} samples, {over:.0f} over 5 ms")


if __name__ == "__main__":
    main()

"""`voxgate bench soak`: many concurrent sessions against a gateway on the fake engine, every frame checked.

Each session speaks workload texts one after another for `--duration` seconds through `VoxgateClient` (which
decodes every frame and plays it on a simulated listener, reporting playback in `client_clock` mode). Checked per
frame: `seq` has no gap on the connection, `pts` is contiguous within a context, and (PCM) the samples equal the
fake engine's tone for the text, bit for bit. Reported: sessions, contexts, frames, lost and garbled frames, and the
listeners' pauses over 10 ms. Sessions are spread over `--processes` client processes (one event loop each).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import random
import sys
import time
from typing import Any

import numpy as np
from voxgate.gateway.transport.loop_lag import watch_loop_lag

from .gateway_process import gateway_base_url

COUNTS = ("sessions", "contexts", "frames", "lost", "garbled", "pauses_over_10ms", "errors", "server_errors")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", required=True, help="a gateway running the fake engine, e.g. http://127.0.0.1:8000")
    p.add_argument("--sessions", type=int, default=256)
    p.add_argument("--processes", type=int, default=2, help="client processes sharing the sessions")
    p.add_argument("--pacing", default="client_clock", choices=["client_clock", "asap", "realtime"])
    p.add_argument("--frame-ms", type=int, default=20)
    p.add_argument("--duration", type=float, default=30.0, help="s each session keeps speaking")
    p.add_argument("--ramp", type=float, default=5.0, help="s over which sessions open")
    p.add_argument("--workload", default="sentences")
    p.add_argument("--out", help="write the summary JSON here")


def _expected(text: str, voice: str) -> np.ndarray:
    from voxgate.engine.fake import fake_audio, fake_duration_samples
    from voxgate.gateway.session.text_split import TextSegmenter

    splitter = TextSegmenter()
    segments = splitter.append(text) + splitter.flush()
    return np.concatenate([fake_audio(s, voice, fake_duration_samples(s)) for s in segments])


async def _session(url: str, args: dict[str, Any], texts: list[str], start_at: float, stats: dict[str, Any]) -> None:
    from voxgate.client.protocol_client import VoxgateClient
    from voxgate.engine.fake import DEFAULT_VOICE

    await asyncio.sleep(max(0.0, start_at - time.monotonic()))
    rng = random.Random()
    async with VoxgateClient(url, pacing=args["pacing"], frame_ms=args["frame_ms"]) as client:
        # no voice named: the fake engine's default speaks (the session defaults to none since issue 14)
        voice = client.session["defaults"]["voice"] or DEFAULT_VOICE
        stats["sessions"] += 1
        end = time.monotonic() + args["duration"]
        n = 0
        last_seq: int | None = None
        while time.monotonic() < end:
            text = rng.choice(texts)
            result = await client.speak(f"s{n}", text)
            n += 1
            stats["contexts"] += 1
            pts = None
            for header, _payload, _ in result.frames:
                stats["frames"] += 1
                if last_seq is not None and header.seq != (last_seq + 1) & 0xFFFFFFFF:
                    stats["lost"] += 1
                last_seq = header.seq
                if pts is not None and header.pts != pts:
                    stats["garbled"] += 1
                pts = header.pts + header.samples
            done = result.event("context.done")
            if done is None or done["end_pts"] != pts:
                stats["garbled"] += 1
            if client.session["audio"]["codec"] == "pcm_s16le" and client.rate == 24_000 and \
                    not np.array_equal(result.audio, _expected(text, voice)):
                stats["garbled"] += 1
        if args["pacing"] != "asap":
            # Let the paced player play out (~its target buffer). Not for asap: it holds what arrived at up to the
            # gateway's full speed (minutes of audio), all of it is in, so no pause can come; waiting would only
            # leave the session idle past the server's idle_timeout.
            await asyncio.sleep(client.player.buffered() / client.rate + 0.1)
        stats["server_errors"] += len(client.errors)
        if client.errors and "server_error_example" not in stats:
            stats["server_error_example"] = client.errors[0]
        stats["pauses_over_10ms"] += len(client.player.gaps_over(0.010))
        stats["max_pause_ms"] = max([stats["max_pause_ms"], *(s.duration_s * 1000 for s in client.player.stalls)])


def _worker(url: str, args: dict[str, Any], count: int, offset: int, t0: float, queue: Any) -> None:
    from .workload import Workload

    texts = Workload.load(args["workload"], length_rule=False).texts
    stats: dict[str, Any] = dict.fromkeys(COUNTS, 0)
    stats["max_pause_ms"] = 0.0
    ws_url = url.replace("http", "ws", 1) + "/v1/tts/ws"  # (url: gateway_base_url's http(s)://HOST:PORT)
    lags: list[float] = []

    async def main() -> None:
        watcher = asyncio.create_task(watch_loop_lag(lags.append))  # the client's own loop lag
        ramp = args["ramp"] / max(1, args["sessions"])
        results = await asyncio.gather(*(_session(ws_url, args, texts, t0 + (offset + i) * ramp, stats)
                                         for i in range(count)), return_exceptions=True)
        watcher.cancel()
        stats["errors"] = sum(isinstance(r, BaseException) for r in results)
        stats["error_examples"] = [repr(r)[:200] for r in results if isinstance(r, BaseException)][:3]

    asyncio.run(main())
    lags.sort()
    stats["client_lag_p99_ms"] = lags[int(len(lags) * 0.99)] * 1000 if lags else None
    queue.put(stats)


def soak_main(ns: argparse.Namespace) -> int:
    args = {k: getattr(ns, k) for k in ("sessions", "pacing", "frame_ms", "duration", "ramp", "workload")}
    base_url = gateway_base_url(ns.url)
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    per = [ns.sessions // ns.processes + (i < ns.sessions % ns.processes) for i in range(ns.processes)]
    t0 = time.monotonic() + 2.0  # the processes start first
    procs, offset = [], 0
    for count in per:
        procs.append(ctx.Process(target=_worker, args=(base_url, args, count, offset, t0, queue)))
        offset += count
    for p in procs:
        p.start()
    parts = [queue.get() for _ in procs]
    for p in procs:
        p.join()
    total: dict[str, Any] = {key: sum(part[key] for part in parts) for key in COUNTS}
    total["server_error_example"] = next((p["server_error_example"] for p in parts if "server_error_example" in p),
                                         None)
    total["max_pause_ms"] = round(max(part["max_pause_ms"] for part in parts), 3)
    total["client_lag_p99_ms"] = max((part["client_lag_p99_ms"] or 0) for part in parts)
    total["error_examples"] = [e for part in parts for e in part["error_examples"]][:3]
    total["plan"] = args | {"processes": ns.processes, "url": ns.url}
    print(json.dumps(total, indent=1))
    if ns.out:
        with open(ns.out, "w") as f:
            json.dump(total, f, indent=1)
    ok = total["lost"] == 0 and total["garbled"] == 0 and total["errors"] == 0
    return 0 if ok else 1


if __name__ == "__main__":  # pragma: no cover
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    sys.exit(soak_main(parser.parse_args()))

"""tts-bench's five HTTP targets and its WebSocket mode against a running gateway, each request exactly as tts-bench
sends it (tests/ttsbench.py), with its defaults: success rate, first byte and audio per target. For the H200 (stage
`ttsbench` of gpu_loop.sh); works against any gateway:

    python3 tests/qwen3tts/gpu_ttsbench.py --url http://127.0.0.1:8000 --n 20 --rate 4 --out results.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from ttsbench import DEFAULTS, RATE, TARGETS, WS_PROTOCOL, body_for, speak_over_ws

TEXTS = ["The birch canoe slid on the smooth planks.", "Glue the sheet to the dark blue background.",
         "It's easy to tell the depth of a well.", "These days a chicken leg is a rare dish.",
         "Rice is often served in round bowls.", "The juice of lemons makes fine punch."]


async def one_http(client: httpx.AsyncClient, url: str, name: str, text: str) -> dict:
    target = TARGETS[name]
    body = body_for(target, text, DEFAULTS["model"], DEFAULTS["voice"], DEFAULTS["language"])
    sent = time.perf_counter()
    first = None
    size = 0
    head = b""
    async with client.stream(target.method, url + target.path, json=body, headers=target.headers) as response:
        async for chunk in response.aiter_bytes():
            if chunk and first is None:
                first = time.perf_counter() - sent
            size += len(chunk)
            head = (head + chunk)[:300]
        ctype = response.headers.get("content-type", "").split(";")[0].strip()
        ok = 200 <= response.status_code < 300 and ctype in target.content_types and size > 0
        error = None if ok else f"{response.status_code} {ctype} {head.decode(errors='replace')[:200]}"
    audio_s = max(0, size - (44 if target.wav else 0)) / 2 / RATE
    return {"target": name, "status": response.status_code, "ok": ok, "first_byte_ms": None if first is None
            else round(first * 1000, 1), "audio_s": round(audio_s, 3), "error": error}


async def one_ws(url: str, text: str) -> dict:
    start = {"model": DEFAULTS["model"], "voice": DEFAULTS["voice"], "language": DEFAULTS["language"]}
    sent = time.perf_counter()
    try:
        result = await speak_over_ws(url, text, start)
    except Exception as exc:  # a failed request is a result here, as in tts-bench
        return {"target": "nari-ws", "ok": False, "error": f"{type(exc).__name__}: {exc}"[:200]}
    return {"target": "nari-ws", "ok": True, "total_ms": round((time.perf_counter() - sent) * 1000, 1),
            "audio_s": round(len(result.pcm) / RATE, 3) if getattr(result, "pcm", None) is not None else None}


async def run(url: str, n: int, rate: float, seed: int) -> list[dict]:
    rng = random.Random(seed)
    results: list[dict] = []
    async with httpx.AsyncClient(timeout=120, headers={"Accept-Encoding": "identity"}) as client:
        for name in TARGETS:
            tasks = []
            for i in range(n):
                tasks.append(asyncio.create_task(one_http(client, url, name, TEXTS[i % len(TEXTS)])))
                await asyncio.sleep(rng.expovariate(rate))
            results += await asyncio.gather(*tasks)
        results += [await one_ws(url, TEXTS[i % len(TEXTS)]) for i in range(min(n, 5))]
    return results


def summary(results: list[dict]) -> dict[str, dict]:
    out = {}
    for name in [*TARGETS, "nari-ws"]:
        rows = [r for r in results if r["target"] == name]
        firsts = sorted(r["first_byte_ms"] for r in rows if r.get("first_byte_ms") is not None)
        out[name] = {"requests": len(rows), "success": sum(r["ok"] for r in rows),
                     "first_byte_p50_ms": statistics.median(firsts) if firsts else None,
                     "first_byte_max_ms": firsts[-1] if firsts else None,
                     "errors": sorted({r["error"] for r in rows if r.get("error")})[:3]}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", default="http://127.0.0.1:8000")
    p.add_argument("--n", type=int, default=20, help="requests per HTTP target")
    p.add_argument("--rate", type=float, default=4.0, help="Poisson arrivals per second within a target")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out")
    args = p.parse_args()
    results = asyncio.run(run(args.url.rstrip("/"), args.n, args.rate, args.seed))
    table = summary(results)
    for name, row in table.items():
        print(f"{name:12s} {row['success']}/{row['requests']} ok, first byte p50 {row['first_byte_p50_ms']} ms, "
              f"max {row['first_byte_max_ms']} ms {row['errors'] or ''}")
    if args.out:
        Path(args.out).write_text(json.dumps({"summary": table, "results": results, "protocol": WS_PROTOCOL}, indent=1))


if __name__ == "__main__":
    main()

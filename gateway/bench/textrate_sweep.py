"""`voxgate bench textrate`: first audio and pauses against the rate text arrives (an LLM agent's words/s), with
text streaming (`text_streaming = "auto"`) beside sentence mode (`"off"`), on gateways it starts itself.

Each point: `--sessions` WebSocket sessions (asap) at once, each speaking `--texts` passage openings (their first
`--sentences` sentences) one word a message at the rate. First audio counts from the first word; pauses follow the
listener's rule (playback.py). The fake engine (default) runs one device per stream, so sessions do not slow each
other; `--engine qwen3tts --config qwen3tts` measures the model, its streams sharing the GPU.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

from .gateway_process import GatewayProcess
from .load_client import Trace, WsClient
from .playback import listen
from .stats import percentile
from .workload import Workload

MODES = {"streaming": "auto", "sentence": "off"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--wps", default="2,4,8,10,16,32,80", help="text rates to measure, words/s")
    p.add_argument("--sessions", type=int, default=4, help="sessions at once per point")
    p.add_argument("--texts", type=int, default=2, help="texts each session speaks per point, one after another")
    p.add_argument("--sentences", type=int, default=3, help="sentences of each passage spoken")
    p.add_argument("--engine", default="fake", help="fake (default) or qwen3tts, as `voxgate serve` takes it")
    p.add_argument("--config", help="the gateways' base config (a TOML file or preset, e.g. qwen3tts); the "
                                    "text-streaming settings are set on top of it")
    p.add_argument("--engine-option", action="append", default=[], metavar="KEY=VALUE",
                   help="engine options on top of the config's (e.g. model=/path/to/checkpoint)")
    p.add_argument("--device-rtf", type=float, default=20.0, help="fake engine speed, x real time per stream")
    p.add_argument("--chunk-ms", default="80", help="fake engine chunk schedule")
    p.add_argument("--min-words", type=int, help="text_stream_min_words (default: the gateway's)")
    p.add_argument("--min-wps", type=float, help="text_stream_min_wps (default: the gateway's)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", help="write report.json and report.md here (a folder)")


def _opening(text: str, sentences: int) -> str:
    parts = text.replace(". ", ".\n").splitlines()
    return " ".join(parts[:sentences])


async def _session(url: str, wps: float, texts: list[str], start_at: float) -> list[Trace]:
    await asyncio.sleep(max(0.0, start_at - time.perf_counter()))
    client = await WsClient.connect(url, text_wps=wps)
    traces = []
    try:
        for text in texts:
            trace = Trace(0, len(text.split()), None, time.perf_counter())
            await client.speak(trace, text)
            traces.append(trace)
    finally:
        await client.close()
    return traces


async def _point(url: str, wps: float, texts: list[str], ns: argparse.Namespace) -> dict[str, Any]:
    t0 = time.perf_counter()
    chunks = [texts[i * ns.texts:(i + 1) * ns.texts] for i in range(ns.sessions)]
    # Starts spread over a word's time, so the sessions' words do not all land in the same loop iteration.
    runs = await asyncio.gather(*(_session(url, wps, c, t0 + i / wps / ns.sessions) for i, c in enumerate(chunks)))
    traces = [t for run in runs for t in run]
    ttfa = sorted(t.ttfa_s * 1000 for t in traces if t.ttfa_s is not None)
    heard = [listen(t.chunks) for t in traces]
    return {"wps": wps, "requests": len(traces), "errors": sum(1 for t in traces if not t.ok),
            "ttfa_ms": {"p50": percentile(ttfa, 50), "p90": percentile(ttfa, 90), "mean": sum(ttfa) / len(ttfa)},
            "pauses": sum(h.num_pauses for h in heard), "pause_total_ms": 1000 * sum(h.total_pause_s for h in heard),
            "pause_max_ms": 1000 * max(h.max_pause_s for h in heard), "audio_s": sum(h.audio_s for h in heard)}


def _base(ns: argparse.Namespace) -> tuple[list[str], dict[str, Any]]:
    """The base config as TOML lines (its top-level settings) and engine options (the config's, then the fake
    engine's defaults, then --engine-option)."""
    from voxgate.gateway.config import config_path

    from .arguments import key_values

    data: dict[str, Any] = {}
    if ns.config:
        with config_path(ns.config).open("rb") as f:
            data = tomllib.load(f)
    options = dict(data.pop("engine_options", {}))
    if ns.engine == "fake":
        options |= {"device_rtf": ns.device_rtf, "shared_device": "false", "chunk_ms": ns.chunk_ms}
    options |= {k: str(v) for k, v in key_values(ns.engine_option).items()}
    skip = {"engine", "host", "port", "text_streaming", "max_sessions", "text_stream_min_words", "text_stream_min_wps"}
    lines = [f"{k} = {json.dumps(v)}" for k, v in data.items() if k not in skip and not isinstance(v, dict)]
    return lines, options


def textrate_main(ns: argparse.Namespace) -> int:
    rates = [float(x) for x in ns.wps.split(",") if x.strip()]
    workload = Workload.load("passages", length_rule=False)
    order = workload.order(ns.seed)
    needed = ns.sessions * ns.texts
    texts = [_opening(workload.texts[order[i % len(order)]], ns.sentences) for i in range(needed)]
    random.Random(ns.seed).shuffle(texts)
    results: dict[str, list[dict[str, Any]]] = {}
    base_lines, options = _base(ns)
    with tempfile.TemporaryDirectory() as tmp:
        for mode, switch in MODES.items():
            config = Path(tmp) / f"{mode}.toml"
            lines = [*base_lines, f'text_streaming = "{switch}"', f"max_sessions = {ns.sessions + 8}"]
            if ns.min_words is not None:
                lines.append(f"text_stream_min_words = {ns.min_words}")
            if ns.min_wps is not None:
                lines.append(f"text_stream_min_wps = {ns.min_wps}")
            config.write_text("\n".join(lines) + "\n")
            with GatewayProcess(ns.engine, options, extra_args=["--config", str(config)]) as gw:
                url = gw.base_url.replace("http://", "ws://") + "/v1/tts/ws"
                results[mode] = []
                for wps in rates:
                    point = asyncio.run(_point(url, wps, texts, ns))
                    results[mode].append(point)
                    print(json.dumps({"mode": mode, **point}), flush=True)
    report = {"params": {k: v for k, v in vars(ns).items() if not k.startswith("_") and k != "bench_command"},
              "words_mean": sum(len(t.split()) for t in texts) / len(texts), "results": results}
    if ns.out:
        out = Path(ns.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "report.json").write_text(json.dumps(report, indent=1))
        (out / "report.md").write_text(markdown(report))
        try:
            from .plots import textrate_plot
        except ImportError:  # matplotlib is the `bench` extra
            pass
        else:
            textrate_plot(report, out / "ttfa_by_wps.png")
    print(markdown(report))
    return 0


def markdown(report: dict[str, Any]) -> str:
    results = report["results"]
    lines = ["| words/s | streaming TTFA p50 / p90 (ms) | sentence TTFA p50 / p90 (ms) | streaming pauses (total ms) "
             "| sentence pauses (total ms) |", "|---|---|---|---|---|"]
    for s, p in zip(results["streaming"], results["sentence"], strict=True):
        lines.append(f"| {s['wps']:g} | {s['ttfa_ms']['p50']:.0f} / {s['ttfa_ms']['p90']:.0f} "
                     f"| {p['ttfa_ms']['p50']:.0f} / {p['ttfa_ms']['p90']:.0f} "
                     f"| {s['pauses']} ({s['pause_total_ms']:.0f}) | {p['pauses']} ({p['pause_total_ms']:.0f}) |")
    return "\n".join(lines) + "\n"

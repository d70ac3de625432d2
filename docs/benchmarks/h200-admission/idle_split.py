"""Idle first audio split by the engine's state at arrival: a request counts as "busy" when another request of the
same phase was in flight when it was sent. Usage: python3 idle_split.py RESULTS (gpu_loop.sh's admission stage
output: adm-idle-ws/, adm-idle-http/, adm-closed*/)."""

from __future__ import annotations

import glob
import json
import os
import statistics
import sys
from pathlib import Path


def percentile(values: list[float], q: float) -> float:
    xs = sorted(values)
    k = (len(xs) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def idle(root: str, name: str) -> None:
    report = json.loads(Path(f"{root}/{name}/report.json").read_text())
    samples = report["open_loop"][0]["rates"][0]["seeds"][0]["samples"]
    measured = [s for s in samples if not s["warmup"]]

    def busy(x: dict) -> bool:
        return any(o is not x and o["sent_s"] < x["sent_s"] < (o["done_s"] or 0) for o in measured)

    ttfa = [s["ttfa_ms"] for s in measured]
    quiet = [s["ttfa_ms"] for s in measured if not busy(s)]
    loaded = [s["ttfa_ms"] for s in measured if busy(s)]
    line = " ".join(f"p{q} {percentile(ttfa, q):.1f}" for q in (50, 90, 95, 99))
    print(f"{name} n {len(ttfa)} {line} | idle n={len(quiet)} median {statistics.median(quiet):.1f} "
          f"max {max(quiet):.1f} | busy n={len(loaded)} median {statistics.median(loaded) if loaded else '-'} "
          f"max {max(loaded) if loaded else '-'}")
    for s in measured:
        if busy(s):
            stages = {k: round(v, 1) for k, v in (s.get("server_stages_ms") or {}).items()}
            print(f"   busy {s['ttfa_ms']:.1f}", stages)


def main(root: str) -> None:
    for name in ("adm-idle-ws", "adm-idle-http"):
        if os.path.exists(f"{root}/{name}/report.json"):
            idle(root, name)
    for folder in sorted(glob.glob(f"{root}/adm-closed*")):
        for phase in json.loads(Path(f"{folder}/report.json").read_text())["closed_loop"]:
            s = phase["summary"]
            print(f"{os.path.basename(folder)} c={phase['params']['concurrency']} {phase['audio_s_per_s']:.2f} "
                  f"audio-s/s ttfa p50 {s['ttfa_ms']['p50']:.1f} p99 {s['ttfa_ms']['p99']:.1f}")


if __name__ == "__main__":
    main(sys.argv[1])

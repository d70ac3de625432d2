"""`voxgate bench stuck`: the server memory a client that stops reading costs, and how soon it is let go.

Opens N sessions that ask for a long asap context and never read, against a gateway it starts itself (fake engine;
`--slow-consumer-s` as given), and samples the server's RSS (user space) and the host's TCP buffer pages (kernel,
`/proc/net/sockstat`) until every stuck session is closed or `--hold` seconds pass.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import tempfile
import time
from pathlib import Path

from .gateway_process import GatewayProcess

PAGE = os.sysconf("SC_PAGE_SIZE")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--clients", type=int, default=50)
    p.add_argument("--slow-consumer-s", type=float, default=5.0)
    p.add_argument("--codec", default="pcm_s16le", choices=["pcm_s16le", "opus"])
    p.add_argument("--hold", type=float, default=30.0, help="s to watch after the clients stopped reading")
    p.add_argument("--out", help="write the samples as JSON here")


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


def _tcp_mem() -> int:
    with open("/proc/net/sockstat") as f:
        line = next(line for line in f if line.startswith("TCP:"))
    fields = line.split()
    return int(fields[fields.index("mem") + 1]) * PAGE


def _stuck_client(port: int, codec: str) -> socket.socket:
    import base64

    sock = socket.create_connection(("127.0.0.1", port))
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall((f"GET /v1/tts/ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)
    for message in ({"type": "session.start", "audio": {"codec": codec}, "pacing": {"mode": "asap"}},
                    {"type": "text.append", "context_id": "x", "text": "word " * 1900 + "."},
                    {"type": "context.end", "context_id": "x"}):
        payload = json.dumps(message).encode()
        mask = os.urandom(4)
        length = bytes([0x80 | len(payload)]) if len(payload) < 126 else bytes([0x80 | 126]) + len(payload).to_bytes(
            2, "big")
        sock.sendall(b"\x81" + length + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))
    return sock  # never read again


def stuck_main(ns: argparse.Namespace) -> int:
    import httpx

    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "stuck.toml"
        config.write_text(f"max_sessions = {ns.clients + 10}\n[limits]\nslow_consumer_s = {ns.slow_consumer_s}\n")
        with GatewayProcess("fake", {"device_rtf": 1000, "shared_device": "false"},
                            extra_args=["--config", str(config)]) as gw:
            assert gw.proc is not None
            pid = gw.proc.pid
            time.sleep(1.0)
            base_rss, base_tcp = _rss(pid), _tcp_mem()
            t0 = time.monotonic()
            clients = [_stuck_client(gw.port, ns.codec) for _ in range(ns.clients)]
            samples = []
            while time.monotonic() - t0 < ns.hold:
                sessions = httpx.get(gw.base_url + "/health").json()["sessions"]
                samples.append({"t_s": round(time.monotonic() - t0, 2), "sessions": sessions,
                                "rss_mb": round((_rss(pid) - base_rss) / 2**20, 1),
                                "tcp_mb": round((_tcp_mem() - base_tcp) / 2**20, 1)})
                print(json.dumps(samples[-1]), flush=True)
                if sessions == 0 and samples[-1]["t_s"] > 1:
                    break
                time.sleep(0.5)
            for c in clients:
                c.close()
    peak = max(samples, key=lambda s: s["rss_mb"] + s["tcp_mb"])
    summary = {"clients": ns.clients, "slow_consumer_s": ns.slow_consumer_s, "codec": ns.codec,
               "peak_rss_mb_per_client": round(peak["rss_mb"] / ns.clients, 3),
               "peak_tcp_mb_per_client": round(peak["tcp_mb"] / ns.clients, 3),
               "all_closed_after_s": next((s["t_s"] for s in samples if s["sessions"] == 0 and s["t_s"] > 1), None),
               "samples": samples}
    print(json.dumps({k: v for k, v in summary.items() if k != "samples"}))
    if ns.out:
        Path(ns.out).write_text(json.dumps(summary, indent=1))
    return 0

"""The request-body limit of POST /v1/audio/speech holds while reading (issue 13, point 5): 413 before the body is
buffered, whether its length is declared or it arrives chunked."""

from __future__ import annotations

import asyncio
import json
import socket
import time

import pytest
from raw import _read_head
from support import bystander
from voxgate.gateway.config import GatewayConfig


def post_head(server, headers: str) -> socket.socket:
    sock = socket.create_connection((server.host, server.port), timeout=10)
    sock.sendall(f"POST /v1/audio/speech HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 f"{headers}\r\n".encode())
    return sock


def declared_100_mb(server) -> tuple[int, dict[str, str], float]:
    """Declare 100 MB and send none of it: the answer must come anyway."""
    t0 = time.monotonic()
    with post_head(server, f"Content-Length: {100 * 2**20}\r\n") as sock:
        status, headers, _ = _read_head(sock)
    return status, headers, time.monotonic() - t0


def chunked_until_refused(server, limit: int) -> tuple[int, int]:
    """Send 8 KiB chunks of one JSON string until the server answers; (status, bytes sent by then)."""
    sent = 0
    with post_head(server, "Transfer-Encoding: chunked\r\n") as sock:
        chunk = b'{"input": "' + b"x" * 8192
        while sent < 20 * limit:
            try:
                sock.sendall(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += len(chunk)
            chunk = b"x" * 8192
            sock.settimeout(0.001)
            try:
                if sock.recv(1, socket.MSG_PEEK):
                    break
            except TimeoutError:
                pass
            finally:
                sock.settimeout(10)
        status, _, _ = _read_head(sock)
    return status, sent


@pytest.mark.slow
async def test_bodies_over_the_limit_get_413_while_reading(gateway, fake_engine):
    limit = 65_536
    server = gateway(engine=fake_engine(device_rtf=200), config=GatewayConfig(max_request_bytes=limit))
    async with bystander(server.ws_url):
        status, headers, seconds = await asyncio.to_thread(declared_100_mb, server)
        chunked_status, sent = await asyncio.to_thread(chunked_until_refused, server, limit)
    assert status == 413 and headers.get("connection") == "close" and seconds < 1.0
    assert chunked_status == 413
    # The server stopped reading at the limit: what was sent by the time it answered is the limit plus what the
    # socket buffers held, far from the 20x the client was ready to send.
    assert sent <= 4 * limit, sent


def test_a_body_within_the_limit_is_served(gateway, fake_engine):
    import httpx

    server = gateway(engine=fake_engine(), config=GatewayConfig(max_request_bytes=200))
    small = httpx.post(server.http_url + "/v1/audio/speech", json={"input": "Hi.", "voice": "tone-a"})
    big = httpx.post(server.http_url + "/v1/audio/speech", content=json.dumps({"input": "Hi." * 100}).encode(),
                     headers={"Content-Type": "application/json"})
    assert small.status_code == 200 and len(small.content) > 0
    assert big.status_code == 413 and big.json()["error"]["code"] == "request_too_large"

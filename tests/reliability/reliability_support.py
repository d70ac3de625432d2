"""Helpers of the reliability suite: a listener that must keep hearing speech while something hostile happens, and a
raw WebSocket client that stops reading (the library clients always read in the background)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket
import struct
from typing import Any

from voxgate.gateway.client import VoxgateClient

PASSAGE = "The birch canoe slid on the smooth planks. Glue the sheet to the dark blue background."  # ~5 s


async def listen_without_pauses(url: str, started: asyncio.Event | None = None) -> VoxgateClient:
    """A paced (`client_clock`) session speaking a passage to the end; the caller checks its player's gaps."""
    async with VoxgateClient(url, pacing="client_clock", target_buffer_ms=150) as client:
        task = asyncio.create_task(client.speak("listener", PASSAGE))
        while not client.player.received_end:
            await asyncio.sleep(0.01)
        if started is not None:
            started.set()
        await task
        await asyncio.sleep(client.player.buffered() / client.rate + 0.1)  # let playback finish
    return client


def gaps_over_10ms(client: VoxgateClient) -> list:
    return client.player.gaps_over(0.010)


class RawClient:
    """A WebSocket client over a plain socket with a small receive buffer, that reads only when told to."""

    def __init__(self, host: str, port: int, rcvbuf: int | None = None) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf is not None:  # small: the buffers fill sooner (and draining them later is slow)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.connect((host, port))
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET /v1/tts/ws HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
                           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                           "Sec-WebSocket-Protocol: voxgate.v1\r\n\r\n").encode())
        response = b""
        while b"\r\n\r\n" not in response:
            response += self.sock.recv(1)  # byte by byte: nothing past the handshake is read
        assert response.startswith(b"HTTP/1.1 101"), response

    def send(self, message: dict[str, Any]) -> None:
        payload = json.dumps(message).encode()
        mask = os.urandom(4)
        header = bytes([0x81])
        if len(payload) < 126:
            header += bytes([0x80 | len(payload)])
        else:
            header += bytes([0x80 | 126]) + struct.pack("!H", len(payload))
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(header + mask + masked)

    def read_all(self, timeout: float = 5.0) -> bytes:
        """Read until the server closes the connection (EOF or reset)."""
        self.sock.settimeout(timeout)
        data = b""
        try:
            while chunk := self.sock.recv(1 << 16):
                data += chunk
        except ConnectionResetError:
            pass
        return data

    def close(self) -> None:
        self.sock.close()

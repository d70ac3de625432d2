"""Clients on plain sockets, for what a polite client library will not do: send invalid UTF-8, stop reading, read
only when told (the library clients always read in the background)."""

from __future__ import annotations

import base64
import json
import os
import socket
import struct
from typing import Any

from voxgate.gateway.protocol import PROTOCOL


def _connect(host: str, port: int, rcvbuf: int | None) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:  # before connect, so the advertised window stays small
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(10)
    sock.connect((host, port))
    return sock


def _read_head(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """Status, headers and whatever body bytes came with them."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            raise ConnectionError(f"closed during the response head: {data!r}")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    return int(lines[0].split()[1]), headers, rest


class RawWebSocket:
    """A WebSocket client that reads only when asked, and sends any bytes as a text frame."""

    def __init__(self, host: str, port: int, path: str = "/v1/tts/ws", headers: dict[str, str] | None = None,
                 rcvbuf: int | None = None) -> None:
        self.sock = _connect(host, port, rcvbuf)
        key = base64.b64encode(os.urandom(16)).decode()
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        if "host" not in {k.lower() for k in headers or {}}:
            extra = f"Host: {host}:{port}\r\n" + extra
        self.sock.sendall((f"GET {path} HTTP/1.1\r\n{extra}Upgrade: websocket\r\nConnection: Upgrade\r\n"
                           f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                           f"Sec-WebSocket-Protocol: {PROTOCOL}\r\n\r\n").encode())
        self.status, self.headers, self._buffer = _read_head(self.sock)

    def send_raw_text(self, payload: bytes) -> None:
        mask = os.urandom(4)
        n = len(payload)
        head = bytes([0x81]) + (bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + struct.pack(">H", n)
                                if n < 65536 else bytes([0x80 | 127]) + struct.pack(">Q", n))
        self.sock.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    def send_json(self, message: dict[str, Any]) -> None:
        self.send_raw_text(json.dumps(message).encode())

    def _read(self, n: int) -> bytes:
        while len(self._buffer) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            self._buffer += chunk
        out, self._buffer = self._buffer[:n], self._buffer[n:]
        return out

    def recv_frame(self) -> tuple[int, bytes]:
        """(opcode, payload) of the next frame: 1 text, 2 binary, 8 close."""
        first, second = self._read(2)
        n = second & 0x7F
        if n == 126:
            n = struct.unpack(">H", self._read(2))[0]
        elif n == 127:
            n = struct.unpack(">Q", self._read(8))[0]
        return first & 0x0F, self._read(n)

    def recv_json(self) -> dict[str, Any]:
        """The next text message (binary frames skipped); a close frame raises ConnectionError with its code."""
        while True:
            opcode, payload = self.recv_frame()
            if opcode == 1:
                return json.loads(payload)
            if opcode == 8:
                code = struct.unpack(">H", payload[:2])[0] if len(payload) >= 2 else None
                raise ConnectionError(f"close {code}", code)

    def read_all(self, timeout: float = 5.0) -> bytes:
        """Everything not yet read, until the server closes the connection (EOF or reset)."""
        self.sock.settimeout(timeout)
        data, self._buffer = self._buffer, b""
        try:
            while chunk := self.sock.recv(1 << 16):
                data += chunk
        except ConnectionResetError:
            pass
        return data

    def close(self) -> None:
        self.sock.close()


class SlowHttpReader:
    """POST a JSON body, read the response head and a little of the body, then stop reading (a tiny window)."""

    def __init__(self, host: str, port: int, body: dict[str, Any], path: str = "/v1/audio/speech") -> None:
        self.sock = _connect(host, port, rcvbuf=4096)
        data = json.dumps(body).encode()
        self.sock.sendall((f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
                           f"Content-Length: {len(data)}\r\n\r\n").encode() + data)
        self.status, self.headers, self.first_bytes = _read_head(self.sock)

    def close(self) -> None:
        self.sock.close()

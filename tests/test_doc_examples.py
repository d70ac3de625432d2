"""The docs' examples run as written, against a real server: the JSON sessions of docs/protocol.md and README.md,
the Python snippets of docs/client.md, and the engine options table of docs/qwen3tts.md (checked against the code)."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import websockets
from voxgate.gateway.protocol import FLAG_FIRST, FLAG_LAST, PROTOCOL, FrameHeader

DOCS = Path(__file__).resolve().parents[1] / "docs"
DOC_URL = "ws://127.0.0.1:8000/v1/tts/ws"  # the URL the docs use; replaced by the test server's
BLOCK = re.compile(r"(?:<!-- example: (client|server) -->\n)?```(\w+)\n(.*?)```", re.DOTALL)
VARYING = {"session_id"}  # strings that differ per run (numbers always may: positions, times)


def blocks(path: Path, language: str) -> list[tuple[str | None, str]]:
    """(role, text) of every fenced block of `language`; role from a `<!-- example: ... -->` line before it."""
    return [(role or None, text) for role, lang, text in BLOCK.findall(path.read_text()) if lang == language]


def protocol_examples() -> list[tuple[list[dict], list[dict]]]:
    marked = [(role, [json.loads(line) for line in text.splitlines() if line.strip()])
              for role, text in blocks(DOCS / "protocol.md", "json") if role]
    assert [role for role, _ in marked] == ["client", "server"] * (len(marked) // 2) and marked, "client, server pairs"
    return [(marked[i][1], marked[i + 1][1]) for i in range(0, len(marked), 2)]


def same_shape(documented: Any, actual: Any, where: str = "$") -> None:
    """The same keys (however deep), equal strings and flags; numbers only need to be numbers; lists are lists."""
    if isinstance(documented, dict):
        assert isinstance(actual, dict) and sorted(actual) == sorted(documented), (where, actual)
        for key, value in documented.items():
            same_shape(value, actual[key], f"{where}.{key}")
    elif isinstance(documented, bool) or documented is None or isinstance(documented, str):
        if where.rpartition(".")[2] not in VARYING:
            assert actual == documented, (where, actual)
    elif isinstance(documented, int | float):
        assert isinstance(actual, int | float) and not isinstance(actual, bool), (where, actual)
    else:
        assert isinstance(actual, type(documented)), (where, actual)


async def exchange(url: str, sent: list[dict], answers: int) -> tuple[list[dict], list[FrameHeader]]:
    """Send every message, then read until `answers` JSON messages came; the binary frames on the way too."""
    messages: list[dict] = []
    frames: list[FrameHeader] = []
    async with websockets.connect(url, subprotocols=[PROTOCOL]) as ws:
        for msg in sent:
            await ws.send(json.dumps(msg))
        while len(messages) < answers:
            raw = await asyncio.wait_for(ws.recv(), 20)
            if isinstance(raw, bytes):
                frames.append(FrameHeader.unpack(raw))
            else:
                messages.append(json.loads(raw))
    return messages, frames


@pytest.mark.parametrize("index", range(len(protocol_examples())))
async def test_protocol_md_example_sessions(gateway, index):
    sent, documented = protocol_examples()[index]
    server = gateway()  # espeak, as the examples say
    answers, frames = await exchange(server.ws_url, sent, len(documented))
    assert [m["type"] for m in answers] == [m["type"] for m in documented], answers
    for doc, real in zip(documented, answers, strict=True):
        same_shape(doc, real, doc["type"])
    if any(m["type"] == "context.done" for m in documented):
        assert frames and frames[0].flags & FLAG_FIRST and frames[-1].flags & FLAG_LAST


async def test_readme_shortest_session(gateway):
    [(_, text)] = blocks(DOCS.parent / "README.md", "json")
    sent = [json.loads(line) for line in text.splitlines() if line.strip()]
    answers, frames = await exchange(gateway().ws_url, sent, 3)
    assert [m["type"] for m in answers] == ["session.started", "context.started", "context.done"], answers
    assert frames and answers[-1]["usage"]["audio_ms"] > 0


CLIENT_SNIPPETS = [text for _, text in blocks(DOCS / "client.md", "python")]


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(CLIENT_SNIPPETS)))
def test_client_md_snippets_run_as_written(gateway, tmp_path, index):
    code = CLIENT_SNIPPETS[index]
    assert DOC_URL in code
    server = gateway()
    done = subprocess.run([sys.executable, "-c", code.replace(DOC_URL, server.ws_url)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and done.stdout.strip(), (done.stdout, done.stderr)


def test_qwen3tts_md_lists_every_engine_option():
    from voxgate.engine.qwen3tts.options import OPTIONS

    text = (DOCS / "qwen3tts.md").read_text()
    table = text.partition("<!-- engine-options -->")[2].partition("<!-- /engine-options -->")[0]
    rows = re.findall(r"^\| `(\w+)` \| (.*) \|$", table, re.MULTILINE)
    assert rows == [(key, meaning.replace("|", "\\|")) for key, meaning in OPTIONS.items()], (
        "regenerate the table from engine/qwen3tts/options.py")


async def test_client_md_a_wrong_token_is_a_voxgate_error_with_close_4001(gateway):
    import voxgate.client

    server = gateway(auth_tokens=["s3cret"])
    with pytest.raises(voxgate.client.VoxgateError) as refused:
        async with voxgate.client.connect(server.ws_url, token="wrong"):
            pass
    assert refused.value.code == "unauthorized" and refused.value.close_code == 4001
    with pytest.raises(websockets.InvalidStatus) as refused_path:
        async with voxgate.client.connect(server.ws_url.replace("/v1/tts/ws", "/v1/tts")):
            pass
    assert refused_path.value.response.status_code == 404

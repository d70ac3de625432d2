"""The docs' examples run as written, against a real gateway started here: every ```sh and ```python block of
README.md and docs/ (but those marked `<!-- not-run: why -->`, e.g. a GPU or the network), the JSON sessions of
docs/protocol.md and README.md, and the engine options table of docs/qwen3tts.md (checked against the code). The
docs' relative links and anchors resolve."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import websockets
from support import running_gateway
from voxgate.engine.espeak import EspeakEngine
from voxgate.gateway.protocol import FLAG_FIRST, FLAG_LAST, PROTOCOL, FrameHeader

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
DOC_HOST = "127.0.0.1:8000"  # the address the docs use; replaced by the test gateway's
# The present-tense pages; docs/history/ and the benchmark reports are records and keep the commands of their day.
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md")), DOCS / "benchmarks" / "README.md"]
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


FENCE = re.compile(r"((?:<!--[^\n]*-->\n)*)```(\w*)\n(.*?)```", re.DOTALL)
RUNNABLE = {"sh", "bash", "python"}
NOT_RUN = re.compile(r"<!-- not-run: (.*?) -->")
COMMANDS = re.compile(r"^(\.venv/|voxgate |curl |python|pytest |bash |sudo )", re.MULTILINE)


@dataclass(frozen=True)
class Example:
    page: Path
    line: int
    language: str
    code: str
    not_run: str | None  # why it cannot run here (GPU, network, minutes), from `<!-- not-run: why -->`

    def __str__(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def examples() -> list[Example]:
    found = []
    for page in PAGES:
        text = page.read_text()
        for match in FENCE.finditer(text):
            comments, language, code = match.groups()
            reason = NOT_RUN.search(comments)
            found.append(Example(page, text.count("\n", 0, match.start(2)) + 1, language, code,
                                 reason.group(1) if reason else None))
    return found


RUN = [e for e in examples() if e.language in RUNNABLE and e.not_run is None]


def test_every_shell_or_python_example_runs_or_says_why_not():
    unlabelled = [str(e) for e in examples() if not e.language and COMMANDS.search(e.code)]
    assert not unlabelled, f"label these command blocks ```sh (and mark them not-run if they cannot run): {unlabelled}"
    assert all(e.not_run.strip() for e in examples() if e.not_run is not None)
    assert len(RUN) >= 10, [str(e) for e in RUN]  # a broken fence pattern would silently run nothing


@pytest.fixture(scope="module")
def doc_gateway() -> Iterator[Any]:
    """One espeak gateway for every example (they share nothing but the server)."""
    with running_gateway(EspeakEngine()) as server:
        yield server


def run_example(example: Example, server: Any, cwd: Path) -> subprocess.CompletedProcess:
    """Run as written, with the docs' address (127.0.0.1:8000) pointing at the test's gateway and `.venv/bin/` at
    this interpreter's scripts; `voxgate say` gets the gateway's URL (its default is the docs' address)."""
    host = server.http_url.removeprefix("http://").rstrip("/")
    code = example.code.replace(DOC_HOST, host)
    if example.language == "python":
        return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=180)
    scripts = Path(sys.executable).parent
    shim = f'voxgate() {{ if [ "$1" = say ]; then shift; command voxgate say --url "{server.ws_url}" "$@"; ' \
           'else command voxgate "$@"; fi; }\n'
    env = {**os.environ, "PATH": f"{scripts}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(["bash", "-euo", "pipefail", "-c", shim + code.replace(".venv/bin/", "")], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=180)


@pytest.mark.slow
@pytest.mark.parametrize("example", RUN, ids=str)
def test_doc_example_runs_as_written(doc_gateway, tmp_path, example):
    done = run_example(example, doc_gateway, tmp_path)
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    if example.language == "python" and "print(" in example.code:
        assert done.stdout.strip(), done.stderr


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)
    return ({slug(h) for h in re.findall(r"^#+ (.*)$", text, re.MULTILINE)}
            | set(re.findall(r'<a id="([^"]+)">', text)))


def test_docs_links_resolve():
    broken = []
    for page in [*PAGES, *sorted((DOCS / "history").glob("*.md"))]:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"\w+:", target):
                continue  # http:, mailto:
            path, _, anchor = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            if not resolved.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
            elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, broken


def test_qwen3tts_md_lists_every_engine_option_with_its_default():
    """The one options table (docs/qwen3tts.md) is Qwen3TTSOptions: every option, its default and its help."""
    import dataclasses

    from voxgate.engine.config import format_value
    from voxgate.engine.qwen3tts.options import OPTIONS, Qwen3TTSOptions

    fields = {f.name: f for f in dataclasses.fields(Qwen3TTSOptions)}
    text = (DOCS / "qwen3tts.md").read_text()
    table = text.partition("<!-- engine-options -->")[2].partition("<!-- /engine-options -->")[0]
    rows = re.findall(r"^\| `(\w+)` \| (`[^`]*`|\(required\)) \| (.*) \|$", table, re.MULTILINE)
    assert [(key, meaning) for key, _, meaning in rows] == [
        (key, meaning.replace("|", "\\|")) for key, meaning in OPTIONS.items()], "regenerate the table from options.py"
    for key, default, _ in rows:
        field = fields[key]
        assert default == ("(required)" if field.default in ("", dataclasses.MISSING)
                           else f"`{format_value(field.default)}`"), key


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

"""Fixtures for the browser tests: Debian chromium through Playwright, a static server, a real gateway (started by
tests/support.py, on sys.path through pytest's `pythonpath` option)."""

from __future__ import annotations

import asyncio
import functools
import http.server
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from browser_paths import ARTIFACTS, PAGES, ROOT, WEB
from support import serve_process

CHROMIUM = os.environ.get("VOXGATE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-dev-shm-usage",  # containers often have a tiny /dev/shm
    "--autoplay-policy=no-user-gesture-required",
    # Headless tabs are never hidden, but keep timers and audio at full rate regardless.
    "--disable-background-timer-throttling",
    "--disable-renderer-backgrounding",
    "--disable-backgrounding-occluded-windows",
]


@pytest.fixture(scope="session")
def chromium() -> str:
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{CHROMIUM} is missing; CI must install Debian chromium (apt-get install chromium)")
        pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium); browser tests skipped")
    return CHROMIUM


@pytest.fixture(scope="session")
def browser(chromium: str) -> Iterator[object]:
    if os.environ.get("CI") == "true":
        from playwright.sync_api import sync_playwright
    else:
        sync_playwright = pytest.importorskip("playwright.sync_api").sync_playwright

    with sync_playwright() as pw:
        # Never a Playwright-downloaded browser: the system chromium only.
        b = pw.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_ARGS)
        _playwright_loop.append(asyncio.get_running_loop())
        try:
            yield b
        finally:
            asyncio.events._set_running_loop(_playwright_loop.pop())
            b.close()


# Playwright's sync API marks its own event loop as running on this thread between sync calls (its dispatcher
# greenlet is suspended inside that loop). Left marked while the session-scoped browser lives, every asyncio test
# this xdist worker takes after a browser test fails ("cannot be called from a running event loop"). The mark is
# set for each browser test and cleared after it, so it never outlives the test that needs it.
_playwright_loop: list[asyncio.AbstractEventLoop] = []


@pytest.fixture(autouse=True)
def _playwright_loop_only_in_browser_tests(request: pytest.FixtureRequest) -> Iterator[None]:
    if _playwright_loop and "browser" in request.fixturenames:
        asyncio.events._set_running_loop(_playwright_loop[-1])
    yield
    asyncio.events._set_running_loop(None)


@pytest.fixture
def page(browser: object) -> Iterator[object]:
    context = browser.new_context(viewport={"width": 1280, "height": 800})  # type: ignore[attr-defined]
    pg = context.new_page()
    pg.errors = []  # type: ignore[attr-defined]
    pg.on("pageerror", lambda exc: pg.errors.append(str(exc)))  # type: ignore[attr-defined]
    pg.on("console", lambda msg: msg.type == "error" and pg.errors.append(msg.text))  # type: ignore[attr-defined]
    try:
        yield pg
    finally:
        context.close()


class _StaticHandler(http.server.SimpleHTTPRequestHandler):
    """web/ at /, e2e/pages/ at /e2e/."""

    def translate_path(self, path: str) -> str:
        path = path.split("?", 1)[0]
        if path.startswith("/e2e/"):
            return str(PAGES / path.removeprefix("/e2e/"))
        return str(WEB / path.lstrip("/"))

    def log_message(self, format: str, *args: object) -> None:
        pass


_StaticHandler.extensions_map = {**_StaticHandler.extensions_map, ".js": "text/javascript"}


@pytest.fixture(scope="session")
def static_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_StaticHandler))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="session")
def gateway() -> Iterator[str]:
    """A real gateway process with the embedded espeak engine on a free port (or, with VOXGATE_E2E_GATEWAY set to
    its base URL, a gateway that is already running); its log is ARTIFACTS/gateway.log."""
    if os.environ.get("VOXGATE_E2E_GATEWAY"):
        yield os.environ["VOXGATE_E2E_GATEWAY"].rstrip("/")
        return
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with serve_process(ARTIFACTS / "gateway.log", "--host", "127.0.0.1", engine="espeak", cwd=ROOT,
                       timeout_s=60) as served:
        yield served.http_url

"""The session's browser (Playwright's sync API) never leaves its event loop marked as running on the thread, so an
asyncio test that an xdist worker takes after a browser test runs, and a browser test after it finds its loop again
(e2e/conftest.py)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
IN_ORDER = ["test_a_browser_test", "test_an_asyncio_test_after_it", "test_another_browser_test_after_that",
            "test_a_plain_test_after_that_finds_no_running_loop"]


def test_a_browser_test(page) -> None:
    assert page.evaluate("1 + 1") == 2


async def test_an_asyncio_test_after_it() -> None:
    await asyncio.sleep(0)


def test_another_browser_test_after_that(page) -> None:
    assert page.evaluate("2 + 2") == 4


def test_a_plain_test_after_that_finds_no_running_loop() -> None:
    assert asyncio.events._get_running_loop() is None


@pytest.mark.slow
def test_the_four_in_order_in_one_process(chromium: str) -> None:
    """xdist may spread the four above over workers: here they run in this order in one process."""
    here = Path(__file__).relative_to(ROOT)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0",
         *(f"{here}::{test}" for test in IN_ORDER)],
        cwd=ROOT, capture_output=True, text=True, timeout=120, env={**os.environ, "PYTEST_ADDOPTS": ""})
    assert done.returncode == 0 and "4 passed" in done.stdout, done.stdout[-3000:]

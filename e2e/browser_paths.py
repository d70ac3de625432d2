"""Paths the browser tests share. e2e/ is on sys.path (it is not a package, so the repository root never is)."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WEB = ROOT / "web"
PAGES = Path(__file__).resolve().parent / "pages"
ARTIFACTS = Path(os.environ.get("VOXGATE_E2E_ARTIFACTS", ROOT / "out" / "e2e"))  # screenshots, gateway log

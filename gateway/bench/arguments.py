"""What a bench run's command line holds: `key=value` flags, and the command that reproduces a run."""

from __future__ import annotations

import argparse
import datetime as dt
import json
from typing import Any


def key_values(items: list[str] | None) -> dict[str, Any]:
    """`key=value` flags; values that parse as JSON become numbers, lists or objects."""
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"expected key=value, got {item!r}")
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


REPEATED = {"engine_option", "serve_arg", "meta", "workload"}
NUMBER_LISTS = {"concurrency", "rates", "seeds"}


def command_line(args: argparse.Namespace, prefix: tuple[str, ...] = ("voxgate", "bench", "run")) -> list[str]:
    """The full command that reproduces `args`, every option explicit (defaults included)."""
    parts = list(prefix)
    for key, value in vars(args).items():
        if key.startswith("_") or key in ("command", "bench_command") or value is None or value is False:
            continue
        flag = "--" + key.replace("_", "-")
        if value is True:
            parts.append(flag)
        elif key in NUMBER_LISTS:
            parts += [flag, ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in value)]
        elif key in REPEATED:
            for item in value:
                parts += [flag, str(item)]
        else:
            parts += [flag, str(value)]
    return parts


def default_name(engine: str | None, transport: str) -> str:
    return f"{engine or 'gateway'}-{transport}-{dt.datetime.now(dt.UTC):%Y%m%d-%H%M%S}"

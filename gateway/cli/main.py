"""The `voxgate` command. Each subcommand lives in its own module with `add_arguments(parser)` and `run(args)`."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

# (subcommand, module, help). Modules must not import torch at import time: `voxgate --help` stays fast.
SUBCOMMANDS: list[tuple[str, str, str]] = [
    ("serve", "voxgate.gateway.cli.serve", "start the gateway (WebSocket, HTTP, demo)"),
    ("say", "voxgate.gateway.cli.say", "speak text through a running gateway into a WAV file"),
    ("synth", "voxgate.engine.qwen3tts.tools.synth_cli", "offline Qwen3-TTS generation to a WAV file"),
    ("checkpoint", "voxgate.engine.qwen3tts.tools.checkpoint_cli",
     "Qwen3-TTS checkpoint tools (synthetic checkpoints)"),
    ("bench", "voxgate.gateway.bench.command", "benchmark a gateway: closed loop, open-loop SLO capacity"),
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="voxgate", description="voxgate: real-time voice gateway")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, module_name, help_text in SUBCOMMANDS:
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:  # an optional part (e.g. the qwen3tts extra) is not installed
            p = sub.add_parser(name, help=f"{help_text} (unavailable: {exc})")
            p.set_defaults(_unavailable=f"voxgate {name} is unavailable: {exc}")
            continue
        p = sub.add_parser(name, help=help_text, description=help_text)
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


# Errors a user can act on (a bad path, option or checkpoint, a refused connection): one line, not a traceback.
# ValueError covers the config, checkpoint and prompt errors. VOXGATE_DEBUG=1 shows the traceback.
USER_ERRORS: tuple[type[BaseException], ...] = (ValueError, OSError, ImportError)


def _user_errors() -> tuple[type[BaseException], ...]:
    """USER_ERRORS, and the clients' own (a WebSocket handshake refused or a bad ws URL, an HTTP request that
    failed, a server's answer the benchmark cannot measure with), imported only once a command failed."""
    import httpx
    from websockets.exceptions import WebSocketException

    from ..bench.load_client import ServerError

    return (*USER_ERRORS, WebSocketException, httpx.HTTPError, ServerError)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "_unavailable", None):
        print(args._unavailable, file=sys.stderr)
        return 2
    try:
        return int(args._run(args) or 0)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if os.environ.get("VOXGATE_DEBUG") or not isinstance(exc, _user_errors()):
            raise
        print(f"voxgate {args.command}: {_one_line(exc)} (VOXGATE_DEBUG=1 shows the traceback)", file=sys.stderr)
        return 1


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if isinstance(exc, ValueError | OSError) and str(exc) else f"{type(exc).__name__}: {text}"


if __name__ == "__main__":
    sys.exit(main())

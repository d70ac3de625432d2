"""`voxgate serve`: the gateway with an engine, on uvicorn."""

from __future__ import annotations

import argparse
import logging
import sys


def _option(text: str) -> tuple[str, object]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    for convert in (int, float):
        try:
            return key, convert(value)
        except ValueError:
            pass
    return key, {"true": True, "false": False}.get(value.lower(), value)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="a TOML file, or a preset name from configs/ (default: configs/default.toml)")
    parser.add_argument("--engine", help="espeak (default, CPU), qwen3tts (GPU) or fake (test tones)")
    parser.add_argument("--engine-option", action="append", type=_option, default=[], metavar="KEY=VALUE",
                        help="an engine constructor option, e.g. model=/path/to/checkpoint (repeatable)")
    parser.add_argument("--host", help="bind address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port (default 8000)")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])


def run(args: argparse.Namespace) -> int:
    import uvicorn
    from voxgate.engine.registry import create_engine

    from .app import create_app
    from .config import load_config
    from .server import uvicorn_config

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = load_config(args.config or "default", host=args.host, port=args.port, engine=args.engine)
        options = dict(config.engine_options)
        options.update(dict(args.engine_option))
        engine = create_engine(config.engine, **options)
    except (ValueError, FileNotFoundError, TypeError) as exc:
        print(f"voxgate serve: {exc}", file=sys.stderr)
        return 2
    app = create_app(engine, config)
    print(f"voxgate: engine {config.engine}; demo at http://{config.host}:{config.port}/ "
          f"(WebSocket ws://{config.host}:{config.port}/v1/tts/ws)", flush=True)
    server = uvicorn.Server(uvicorn_config(app, config.host, config.port, log_level=args.log_level))
    server.run()
    return 0 if server.started else 1

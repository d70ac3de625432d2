"""`voxgate serve`: the gateway with an engine, on uvicorn."""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import ipaddress
import logging
import os
import socket
import sys
from typing import Any

log = logging.getLogger("voxgate.serve")


def _option(text: str) -> tuple[str, str]:
    """`key=value`, the value still a string: the engine types it by its option's type (voxgate.engine.config)."""
    from voxgate.engine.config import split_pair

    try:
        return split_pair(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from voxgate.engine.config import describe_options
    from voxgate.engine.qwen3tts.options import Qwen3TTSOptions  # no torch: the options only

    parser.formatter_class = argparse.RawDescriptionHelpFormatter  # the options' list keeps its lines
    parser.epilog = describe_options("qwen3tts engine options (--engine-option KEY=VALUE, default shown)",
                                     Qwen3TTSOptions)
    parser.add_argument("--config", help="a TOML file, or a preset name from configs/ (default: configs/default.toml)")
    parser.add_argument("--engine", help="espeak (default, CPU), qwen3tts (GPU) or fake (test tones)")
    parser.add_argument("--engine-option", action="append", type=_option, default=[], metavar="KEY=VALUE",
                        help="an engine constructor option, e.g. model=/path/to/checkpoint (repeatable)")
    parser.add_argument("--host", help="bind address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port (default 8000)")
    parser.add_argument("--agent-port", type=int, help="HAProxy agent check on this TCP port (config agent_port; "
                                                       "with --gpus, consecutive from it like --port)")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    parser.add_argument("--device", help="cuda:N (the process then sees GPU N only), cuda or cpu: where the engine "
                                         "runs; also labels every metric device=\"...\"")
    parser.add_argument("--gpus", metavar="all|0,1,...",
                        help="one supervised gateway process per GPU, on consecutive ports from --port: a crashed one "
                             "restarts, SIGTERM drains them all (docs/deploy.md)")


def run(args: argparse.Namespace) -> int:
    from voxgate.engine.registry import DEVICE_ENGINES, create_engine
    from voxgate.gateway.app import create_app
    from voxgate.gateway.config import load_config
    from voxgate.gateway.transport.uvicorn_server import draining_server, uvicorn_config

    from .devices import narrow_to

    # A crash in native code (a codec, a CUDA library) prints every thread's Python stack to stderr before the
    # process dies: the one report an operator can act on.
    faulthandler.enable()
    where = f"[{args.device}] " if args.device else ""  # children of --gpus share one terminal
    logging.basicConfig(level=args.log_level.upper(), format=f"%(asctime)s %(levelname)s {where}%(name)s: %(message)s")
    if args.gpus is not None:
        return _supervise(args)
    try:
        config = load_config(args.config or "default", host=args.host, port=args.port, engine=args.engine,
                             device=args.device, agent_port=args.agent_port)
        options = dict(config.engine_options)
        options.update(dict(args.engine_option))
        if config.device:  # before the engine's module is imported: CUDA must not have started yet
            engine_device = narrow_to(config.device, os.environ)
            if config.engine in DEVICE_ENGINES:
                options["device"] = engine_device
        engine = create_engine(config.engine, **options)
    except (ValueError, FileNotFoundError) as exc:
        print(f"voxgate serve: {exc}", file=sys.stderr)
        return 2
    try:  # bind first: a taken port is told at once, not after minutes of engine warm-up
        sock = _bind(config.host, config.port)
    except OSError as exc:
        print(f"voxgate serve: cannot listen on {config.host}:{config.port}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    if not config.auth_tokens and not is_loopback(config.host):
        print(f"voxgate serve: warning: listening on {config.host} with auth off: anyone who can reach this port "
              "may use the gateway; set auth_tokens, or --host 127.0.0.1 to stay on this machine", file=sys.stderr)
    app = create_app(engine, config)
    uv_config = uvicorn_config(app, config.host, config.port, log_level=args.log_level)
    server = draining_server(app, uv_config)
    factory = getattr(uv_config, "get_loop_factory", lambda: None)()
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(_serve(server, app, engine, sock, config.engine,
                                 f"{config.host}:{sock.getsockname()[1]}"))


def _supervise(args: argparse.Namespace) -> int:
    """`--gpus`: children `voxgate serve --device cuda:N --port P+k`, with this command's other options."""
    from voxgate.gateway.config import load_config
    from voxgate.gateway.transport.shutdown import HARD_EXIT_AFTER_S

    from .devices import parse_gpus
    from .supervisor import Supervisor

    try:
        if args.device:
            raise ValueError("--gpus and --device exclude each other (each child gets its own --device)")
        config = load_config(args.config or "default", host=args.host, port=args.port, engine=args.engine,
                             agent_port=args.agent_port)
        indices = parse_gpus(args.gpus)
        if config.port == 0 or config.port + len(indices) > 65536:
            raise ValueError(f"--gpus needs {len(indices)} consecutive ports from --port (not {config.port})")
    except (ValueError, FileNotFoundError) as exc:
        print(f"voxgate serve: {exc}", file=sys.stderr)
        return 2
    shared = [sys.executable, "-m", "voxgate.gateway.cli", "serve", "--log-level", args.log_level]
    for flag, value in (("--config", args.config), ("--engine", args.engine), ("--host", args.host)):
        if value:
            shared += [flag, value]
    for key, value in args.engine_option:
        shared += ["--engine-option", f"{key}={value}"]
    children = [(f"cuda:{index}", config.port + k) for k, index in enumerate(indices)]
    print("voxgate: supervising " + ", ".join(f"{d} on {config.host}:{p}" for d, p in children), flush=True)
    # A child ends within its grace plus the hard deadline by itself (transport/shutdown.py); the margin covers its
    # start-up.
    def command(device: str, port: int) -> list[str]:
        agent = ["--agent-port", str(config.agent_port + port - config.port)] if config.agent_port else []
        return [*shared, "--device", device, "--port", str(port), *agent]

    supervisor = Supervisor(command, children, stop_after_s=config.shutdown_grace_s + HARD_EXIT_AFTER_S + 3.0)
    return supervisor.run()


def is_loopback(host: str) -> bool:
    """Whether `host` binds this machine's loopback only (an IP literal of it, or `localhost`); a name or an
    address other than that may be reachable from the network."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


async def _serve(server: Any, app: Any, engine: Any, sock: socket.socket, name: str, where: str) -> int:
    """Listen at once (/health answers 503 `starting`, new sessions are refused with `not_ready` while the engine
    loads, so a balancer or probe sees a loading backend), start the engine, then serve until a signal. A failed
    start ends the process with one line (the traceback at --log-level debug)."""
    from .supervisor import notify_ready

    app.state.engine_started_outside = True
    # uvicorn's start and stop lines only once the engine is up: a failed start stays one line
    quiet = [logging.getLogger(n) for n in ("uvicorn", "uvicorn.error")]
    levels = [q.level for q in quiet]
    for q in quiet:
        q.setLevel(max(q.getEffectiveLevel(), logging.WARNING))
    serving = asyncio.ensure_future(server.serve(sockets=[sock]))
    while not server.started and not serving.done():
        await asyncio.sleep(0.01)
    print(f"voxgate: listening on {where}; starting the {name} engine (/health answers 503 until it is ready)",
          flush=True)
    try:
        await engine.start()
    except Exception as exc:
        log.debug("the engine failed to start", exc_info=True)
        why = str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}"  # ValueError: told to users
        print(f"voxgate serve: the {name} engine failed to start: {why}", file=sys.stderr)
        server.should_exit = True
        await serving
        return 1
    for q, level in zip(quiet, levels, strict=True):
        q.setLevel(level)
    await app.state.on_engine_ready()
    notify_ready()  # a supervisor (--gpus) counts a start as failed only if the child dies before this
    print(f"voxgate: engine {name}; demo at http://{where}/ (WebSocket ws://{where}/v1/tts/ws)", flush=True)
    await serving
    return 0 if server.started else 1

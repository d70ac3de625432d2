"""Engines by name. Imports are lazy so that the gateway never imports torch unless asked for `qwen3tts`."""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from .base import Engine
from .config import typed_options

# name -> "module:factory"; a factory takes keyword options and returns an Engine.
ENGINES: dict[str, str] = {
    "espeak": "voxgate.engine.espeak:EspeakEngine",
    "qwen3tts": "voxgate.engine.qwen3tts.engine:create_engine",
    "fake": "voxgate.engine.fake:FakeEngine",
}

# Engines that run on an accelerator take a `device` option (cuda, cuda:N, cpu); `voxgate serve --device` sets it.
DEVICE_ENGINES = frozenset({"qwen3tts"})


def create_engine(name: str, **options: Any) -> Engine:
    try:
        target = ENGINES[name]
    except KeyError:
        raise ValueError(f"unknown engine {name!r}; choose one of {sorted(ENGINES)}") from None
    module_name, factory_name = target.split(":")
    factory = getattr(importlib.import_module(module_name), factory_name)
    valid = option_names(factory)
    unknown = sorted(set(options) - set(valid or options))
    if unknown:
        raise ValueError(f"unknown option(s) for the {name} engine: {', '.join(unknown)}; "
                         f"its options: {', '.join(valid or []) or 'none'}")
    # Typed by the factory's annotations (strings from the command line); a `**options` factory types its own.
    return factory(**(typed_options(factory, options, strict=False) if valid is not None else options))


def option_names(factory: Any) -> list[str] | None:
    """The keyword options a factory takes; None for a `**options` factory, which checks its options itself."""
    params = inspect.signature(factory).parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]

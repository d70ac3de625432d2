"""Engines by name. Imports are lazy so that the gateway never imports torch unless asked for `qwen3tts`."""

from __future__ import annotations

import importlib
from typing import Any

from .base import Engine

# name -> "module:factory"; a factory takes keyword options and returns an Engine.
ENGINES: dict[str, str] = {
    "espeak": "voxgate.engine.espeak:EspeakEngine",
    "qwen3tts": "voxgate.engine.qwen3tts.engine:create_engine",
    "fake": "voxgate.engine.fake:FakeEngine",
}


def create_engine(name: str, **options: Any) -> Engine:
    try:
        target = ENGINES[name]
    except KeyError:
        raise ValueError(f"unknown engine {name!r}; choose one of {sorted(ENGINES)}") from None
    module_name, factory_name = target.split(":")
    factory = getattr(importlib.import_module(module_name), factory_name)
    return factory(**options)

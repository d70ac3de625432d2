"""Engine options: one dataclass field per option (its type, default and help), and the one `key=value` parser.

`voxgate serve --engine-option key=value` and a preset's `[engine_options]` both reach an engine through
`typed_options`: strings from the command line, TOML values from a preset, each turned into the type of the field
(or constructor parameter) of the same name. `EngineConfig` holds the engine loop's options, common to any batched
engine; an engine's own options extend it (engine/qwen3tts/options.py).
"""

from __future__ import annotations

import dataclasses
import inspect
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

T = TypeVar("T")


def option(default: Any, help: str) -> Any:
    """A dataclass field with its help text (`--help`, the docs tables); sequences become tuples."""
    return dataclasses.field(default=default, metadata={"help": help})


@dataclasses.dataclass(frozen=True)
class EngineConfig:
    """The engine loop's options (scheduler, steps, pipelining): engine/scheduler.py and engine/core.py take their
    defaults from here."""

    max_rows: int = option(128, "decode rows per step (the largest row bucket; default 128)")
    # One stream's step has a bucket of its own; 2-7 rows pad to 8. On a Hopper GPU its projections take
    # kernels/gemv.py (small_gemm = auto): 3.4 ms a 1-row step against 4.8 for 8 rows through cuBLAS (H100). With
    # cuBLAS alone a 1-row step is no faster than 8 rows (H200, 1.7B: 5.11 against 4.81 ms).
    row_buckets: tuple[int, ...] = option((1, 8, 16, 32, 64, 96, 128),
                                          "captured row buckets (default 1,8,16,32,64,96,128: one stream's step "
                                          "takes 1, fewer than 8 rows pad to 8)")
    prefill_buckets: tuple[int, ...] = option((64, 256), "captured prompt-token buckets per step, e.g. 64,256")
    max_prefills: int = option(4, "new prompts per step (default 4)")
    enforce_eager: bool = option(False, "true: no CUDA graphs")
    deadline_order: bool = option(True, "false: rows round-robin instead of to the streams closest to a stall")
    urgent_s: float = option(0.15, "decode pending frames early when a listener runs dry within this (default 0.15; "
                                   "0: off)")
    max_ahead_s: float = option(30.0, "a stream this far ahead of its listener gets no row (default 30)")
    pipeline: bool = option(True, "false: read each step before launching the next (default true: launch it first, "
                                  "host work overlaps)")
    pipeline_min_rows: int = option(1, "pipeline only steps that make at least this many frames (or none: prompt "
                                       "pieces only): a smaller batch reads each step before the next, so a new "
                                       "stream waits behind no queued step, at the cost of the host's time a step "
                                       "(default 1: every step that makes a frame; 0: every step)")
    early_first_chunk: bool = option(True, "collect a codec call carrying a stream's first chunk as soon as it is "
                                           "decoded, before waiting for the step in flight (default true)")
    early_end: bool = option(True, "collect a codec call holding a stream's last frames before waiting for the step "
                                   "in flight, and hand over its last chunk and its end at once (default true)")
    codec_fill: bool = option(True, "a codec call of pieces that could all wait goes only when its bucket is at "
                                    "least 3/4 full, and one with pieces that cannot wait takes as many more as make "
                                    "its cost per piece least (default true; false: every due piece every step)")
    gil_switch_ms: float = option(0.5, "CPython's thread switch interval while the loop runs (default 0.5; 0 leaves "
                                       "it); 0.1 made loaded steps with word times a fifth shorter on an H100, the "
                                       "same capacity, streams past it paused")


def option_help(cls: type) -> dict[str, str]:
    """Every option of an options dataclass with its help: an engine's own first, then those it inherits (the
    loop's), each class's in field order."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    order = [name for klass in cls.__mro__ for name in vars(klass).get("__annotations__", {}) if name in fields]
    return {name: fields[name].metadata.get("help", "") for name in dict.fromkeys(order)}


def describe_options(title: str, cls: type) -> str:
    """A `--help` section: one line per option, its default and its help."""
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    lines = [f"  {name}={format_value(defaults[name])}  {text}" for name, text in option_help(cls).items()]
    return "\n".join([f"{title}:", *lines])


def format_value(value: Any) -> str:
    """A default as one writes it after `key=`: 1,2,4 for a tuple, 1x4,8x4 for buckets, true, none."""
    if isinstance(value, bool):
        return str(value).lower()
    if value is None:
        return "none"
    if isinstance(value, tuple):
        return ",".join("x".join(map(str, v)) if isinstance(v, tuple) else str(v) for v in value)
    return str(value)


def option_types(target: Callable[..., Any]) -> dict[str, Any]:
    """The type of each option: an options dataclass's fields, or a factory's annotated keyword parameters."""
    if inspect.isclass(target) and dataclasses.is_dataclass(target):
        hints = typing.get_type_hints(target)
        return {f.name: hints[f.name] for f in dataclasses.fields(target)}
    hints = typing.get_type_hints(target.__init__ if inspect.isclass(target) else target)
    return {name: kind for name, kind in hints.items() if name != "return"}


def split_pair(text: str) -> tuple[str, str]:
    """'key=value' -> ('key', 'value'): the value stays a string until the engine's option types it."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ValueError(f"expected key=value, got {text!r}")
    return key.strip(), value


def typed_options(target: Callable[..., Any], options: Mapping[str, Any], strict: bool = True) -> dict[str, Any]:
    """Each value as its option's type (a string from the command line or a TOML value); options without a
    known type pass unchanged (the engine checks names itself). Not strict: a value that does not convert passes
    unchanged too, for an engine that checks its values itself."""
    kinds = option_types(target)
    out = {}
    for key, value in options.items():
        try:
            out[key] = coerce(value, kinds[key]) if key in kinds else value
        except ValueError as exc:
            if strict:
                raise ValueError(f"option {key}: {exc}") from None
            out[key] = value
    return out


def parse_options(cls: type[T], options: Mapping[str, Any]) -> T:
    """An options dataclass from `key: value` pairs; an unknown key is refused with the list of valid ones."""
    help_ = option_help(cls)
    unknown = sorted(set(options) - set(help_))
    if unknown:
        valid = "; ".join(f"{k}: {v}" for k, v in help_.items())
        raise ValueError(f"unknown option(s) {', '.join(unknown)}; valid options: {valid}")
    return cls(**typed_options(cls, options))


def coerce(value: Any, kind: Any) -> Any:
    """`value` as `kind`: bool, int, float, str, X | None, tuple[int, ...] ('1,2,4') or tuple[tuple[int, int],
    ...] ('1x4,8x4')."""
    args = typing.get_args(kind)
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        empty = value is None or value == "" or (isinstance(value, str) and value.lower() == "none")
        if empty and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return coerce(value, inner[0]) if len(inner) == 1 else value
    if typing.get_origin(kind) is tuple:
        return _tuple(value, args[0])
    if kind is bool:
        return _flag(value)
    if kind is Any:
        return value
    if kind in (int, float):
        if isinstance(value, bool):
            raise ValueError(f"expected a number, got {value!r}")
        try:
            number = kind(value) if not isinstance(value, str) else kind(value.strip())
        except (TypeError, ValueError):
            raise ValueError(f"expected {'an integer' if kind is int else 'a number'}, got {value!r}") from None
        if kind is int and isinstance(value, float) and number != value:
            raise ValueError(f"expected an integer, got {value!r}")
        return number
    if kind is str:
        return str(value)
    return value


def _flag(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected true or false, got {value!r}")


def _tuple(value: Any, item: Any) -> tuple[Any, ...]:
    items = value if isinstance(value, (list, tuple)) else [x for x in str(value).split(",") if x.strip()]
    if typing.get_origin(item) is tuple:  # pairs such as codec buckets: "1x4,8x4"
        try:
            pairs = tuple(tuple(int(n) for n in (x.lower().split("x") if isinstance(x, str) else x)) for x in items)
        except ValueError:
            pairs = ((0,),)
        if any(len(p) != 2 or min(p) < 1 for p in pairs):
            raise ValueError(f"expected ROWSxFRAMES pairs, e.g. 1x4,8x4 (got {value!r})")
        return pairs
    try:
        return tuple(int(x) for x in items)
    except ValueError:
        raise ValueError(f"expected integers separated by commas, got {value!r}") from None

"""Qwen3TTSOptions is the one source of the engine's options: the docs table (tests/test_doc_examples.py), the preset
and the one key=value parser follow it; RunnerConfig and SchedulerConfig take their defaults from it."""

from __future__ import annotations

import dataclasses
import tomllib
import typing
from pathlib import Path

import pytest
from voxgate.engine.config import EngineConfig, coerce, split_pair, typed_options
from voxgate.engine.qwen3tts.options import OPTIONS, Qwen3TTSOptions, parse
from voxgate.engine.scheduler import SchedulerConfig

ROOT = Path(__file__).resolve().parents[2]
FIELDS = {f.name: f for f in dataclasses.fields(Qwen3TTSOptions)}
TYPES = typing.get_type_hints(Qwen3TTSOptions)


def test_the_preset_sets_only_options_that_exist_with_their_types() -> None:
    preset = tomllib.loads((ROOT / "configs" / "qwen3tts.toml").read_text())["engine_options"]
    assert set(preset) <= set(OPTIONS)
    for key, value in preset.items():
        kind = TYPES[key]
        union = typing.get_origin(kind) in (typing.Union, type(int | None))
        base = next(a for a in typing.get_args(kind) if a is not type(None)) if union else kind
        origin = typing.get_origin(base) or base
        number = origin is float and isinstance(value, int)
        assert isinstance(value, str if origin is tuple else origin) or number, key
        coerce(value, kind)
    parse(preset)


def test_runner_and_scheduler_defaults_are_the_options_defaults() -> None:
    pytest.importorskip("torch")
    from voxgate.engine.qwen3tts.runner import RunnerConfig

    defaults, runner, scheduler = Qwen3TTSOptions(), RunnerConfig(), SchedulerConfig()
    for name in ("row_buckets", "prefill_buckets", "max_prefills", "max_positions", "kv_memory_fraction",
                 "codec_width", "attention", "depth", "small_gemm", "codec", "enforce_eager"):
        assert getattr(runner, name) == getattr(defaults, name), name
    assert runner.max_slots is defaults.slots is None  # auto: sized from free memory at start
    assert parse({"max_slots": 300}).slots == 300 and parse({"max_slots": "auto"}).slots is None
    with pytest.raises(ValueError, match="max_slots must be auto or a number"):
        parse({"max_slots": "1"})
    assert SchedulerConfig.of(defaults) == scheduler
    assert scheduler.max_prefill_tokens == max(EngineConfig().prefill_buckets)


@pytest.mark.parametrize("text,kind,expected", [
    ("true", bool, True), ("off", bool, False), ("4", int, 4), ("0.5", float, 0.5), ("cuda", str | None, "cuda"),
    ("none", str | None, None), ("1,2,4", tuple[int, ...], (1, 2, 4)),
    ("1x4,8x4", tuple[tuple[int, int], ...] | None, ((1, 4), (8, 4)))])
def test_one_parser_types_a_command_line_value_by_its_field(text: str, kind: object, expected: object) -> None:
    assert coerce(split_pair(f"key={text}")[1], kind) == expected


def test_a_value_of_the_wrong_type_names_its_option() -> None:
    with pytest.raises(ValueError, match="option max_rows: expected an integer"):
        typed_options(Qwen3TTSOptions, {"max_rows": "many"})
    with pytest.raises(ValueError, match="expected key=value"):
        split_pair("max_rows")


def test_the_aligner_sizes_are_checked_when_parsed() -> None:
    """The graphs' sizes fail at parse time with their names, not when the aligner captures minutes later."""
    assert parse({"aligner_graph_chunks": 256, "aligner_graph_clips": 64}).aligner_graph_chunks == 256
    with pytest.raises(ValueError, match="aligner_graph_chunks must be a power of two, not 48"):
        parse({"aligner_graph_chunks": 48})
    with pytest.raises(ValueError, match="aligner_graph_steps must be 1, 2, 4 or 8, not 3"):
        parse({"aligner_graph_steps": 3})
    for key in ("aligner_max_batch", "aligner_graph_clips"):
        with pytest.raises(ValueError, match="aligner_max_batch and aligner_graph_clips must be at least 1"):
            parse({key: 0})



def test_the_aligner_options_reach_the_aligner_worker_as_its_arguments() -> None:
    pytest.importorskip("torch")
    import inspect

    from voxgate.engine.aligner.worker import AlignerWorker

    options = parse({"aligner_graph_clips": 48, "aligner_prefill_attention": False, "aligner_encoder_graphs": False,
                     "aligner_graph_steps": 2, "aligner_priority": "high", "aligner_gather_ms": 80})
    given = options.aligner_worker
    assert set(given) <= set(inspect.signature(AlignerWorker).parameters)
    assert given["graph_clips"] == 48 and given["prefill_attention"] is False and given["encoder_graphs"] is False
    assert given["graph_steps"] == 2 and given["priority"] == "high" and given["gather_s"] == 0.08
    assert parse({}).aligner_worker["gather_s"] == 0.12
    for name in ("aligner_gather_ms", "aligner_not_held_group_ms"):
        with pytest.raises(ValueError, match="aligner_gather_ms must be >= 0"):
            parse({name: -1})
    with pytest.raises(ValueError, match="aligner_priority must be normal or high"):
        parse({"aligner_priority": "urgent"})
    assert given["max_batch"] == 64 and given["graph_chunks"] == 256 and given["graphs"] is True


def test_the_step_options_reach_the_runner_and_bad_names_are_refused() -> None:
    """epilogue and text_table go to RunnerConfig as given; a value outside each one's names is refused when the
    runner's config is built, before any model loads."""
    pytest.importorskip("torch")
    from voxgate.engine.qwen3tts.runner_config import RunnerConfig

    given = parse({"epilogue": "torch", "text_table": "mlp"}).runner_options()
    config = RunnerConfig(**given)
    assert (config.epilogue, config.text_table) == ("torch", "mlp")
    for name, bad in (("epilogue", "cuda"), ("text_table", "lookup")):
        with pytest.raises(ValueError, match=f"{name} must be"):
            RunnerConfig(**{**given, name: bad})


def test_serve_help_lists_every_option() -> None:
    import argparse

    from voxgate.gateway.cli.serve import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    text = parser.format_help()
    assert all(f"  {name}=" in text for name in OPTIONS)

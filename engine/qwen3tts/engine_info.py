"""What `GET /health` says about a Qwen3-TTS engine (`Engine.info`): the model, the loop's shape, the step's kernels
and buckets, memory and timings."""

from __future__ import annotations

from typing import Any


def describe(engine: Any) -> dict[str, Any]:
    """`engine`: a Qwen3TTSEngine, loaded or not (before the load, the options only)."""
    tts, runner = engine.tts, engine.runner
    out: dict[str, Any] = {"name": engine.name, "model": engine.model_path,
                           "chunk_schedule_frames": list(engine.chunk_schedule), "max_frames": engine.max_frames,
                           "frame_budget": f"{engine.budget_factor} x expected frames, >= {engine.min_budget_s} s",
                           "batching": "engine loop (batched steps)", "pipeline": engine.pipeline,
                           "pipeline_min_rows": engine.options.pipeline_min_rows,
                           "early_first_chunk": engine.options.early_first_chunk, "early_end": engine.options.early_end,
                           "timings_s": engine.timings,
                           "aligner": engine.aligner_path}
    if tts is not None:
        import torch

        out |= {"model_type": tts.cfg.tts_model_type, "repo_id": tts.cfg.repo_id, "device": str(tts.device),
                "dtype_talker": str(next(tts.talker.parameters()).dtype),
                "dtype_codec": str(next(tts.codec.parameters()).dtype)}
        if runner is not None:
            c = runner.config
            out |= {"codec": type(runner.codec).__name__, "cuda_graphs": runner.steps.use_graphs,
                    "row_buckets": list(c.row_buckets), "prefill_buckets": list(c.prefill_buckets),
                    "codec_buckets": [list(b) for b in c.codec_buckets],
                    "step_kernels": runner.ops.attend_name, "depth": c.depth, "small_gemm": runner.small_gemm,
                    "gemv_rows": c.gemv_rows, "gemv_talker_rows": c.gemv_talker_rows, "gemv_split": c.gemv_split,
                    "gemv_layout": c.gemv_layout,
                    "pdl": runner.ops.pdl, "fuse_attention": runner.ops.attend_new is not None,
                    "deadline_order": engine.scheduler_config.deadline_order, **runner.memory()}
        if tts.device.type == "cuda":
            out["gpu"] = torch.cuda.get_device_name(tts.device)
    return out


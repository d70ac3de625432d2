"""Helpers for the engine-loop tests: a runner that records every row's frames, an EngineCore driven step by step
with streams joining, finishing and being cancelled, and the eager batch-1 references (codes, teacher-forced
logits) each stream is compared with."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from voxgate.engine.core import EngineCore, StepOutput
from voxgate.engine.qwen3tts.model.generate import Qwen3TTS
from voxgate.engine.qwen3tts.model.prompt import prompt_rows
from voxgate.engine.qwen3tts.model.sampling import param_row
from voxgate.engine.qwen3tts.runner import ModelRunner, RunnerConfig
from voxgate.engine.request import Request, Status
from voxgate.engine.scheduler import SchedulerConfig, StepPlan

from .teacher_forcing import TeacherForcedRunner

SMALL = dict(row_buckets=(1, 2, 4, 8, 16), prefill_buckets=(16, 64), max_positions=320, max_trailing=96,
             codec_buckets=((1, 1), (4, 1), (16, 1), (4, 4), (16, 4), (4, 16), (8, 16)), progress=False)


class RecordingRunner:
    """A ModelRunner that keeps each sampled row's frame (EOS samples excluded) and its logits when recording."""

    def __init__(self, runner: ModelRunner) -> None:
        self.runner = runner
        self.codes: dict[int, list[np.ndarray]] = defaultdict(list)
        self.logits: dict[int, list[list[torch.Tensor]]] = defaultdict(list)  # per frame: [codebook 0, 1..15]
        self.rows_per_step: list[int] = []  # decode rows of each step read
        self.sampled_per_step: list[list[int]] = []  # request ids of each step's sampled rows (first frames too)
        self.make_up: list[tuple[int, int, int]] = []  # per step launched: decode rows, prompts completed, pieces

    def __getattr__(self, name: str) -> Any:
        return getattr(self.runner, name)

    def launch(self, plan: StepPlan) -> tuple[StepPlan, Any]:
        completing = sum(p.completes for p in plan.prefills)
        self.make_up.append((len(plan.decodes), completing, len(plan.prefills) - completing))
        return plan, self.runner.launch(plan)

    def finish(self, handle: tuple[StepPlan, Any]) -> np.ndarray:
        plan, launched = handle
        eos = self.runner.finish(launched)
        sampled = plan.sampled
        self.rows_per_step.append(len(plan.decodes))
        self.sampled_per_step.append([r.request_id for r in sampled])
        if not sampled:
            return eos
        frames = launched.frames()
        for i, (request, ended) in enumerate(zip(sampled, eos, strict=True)):
            if request.ended or request.status is not Status.RUNNING:
                continue  # a row launched before its stream ended (the loop drops it too)
            if launched.logits:
                self.logits[request.request_id].append([lg[i].clone() for lg in launched.logits])
            if not ended:
                self.codes[request.request_id].append(frames[i])
        return eos


@dataclass
class Stream:
    text: str
    budget: int
    join_step: int
    speaker: str = "ryan"
    non_streaming: bool = True
    schedule: tuple[int, ...] = (1, 2, 4)
    cancel_step: int | None = None
    request: Request | None = None
    audio: list[np.ndarray] = field(default_factory=list)

    @property
    def codes_id(self) -> int:
        assert self.request is not None
        return self.request.request_id


def make_runner(tts: Qwen3TTS, num_slots: int = 17, record_logits: bool = False, **overrides: Any) -> ModelRunner:
    """record_logits: a teacher-forced runner that keeps each step's logits (and takes `forced` codes in drive)."""
    runner_class = TeacherForcedRunner if record_logits else ModelRunner
    runner = runner_class(tts, RunnerConfig(**{**SMALL, **overrides}), num_slots=num_slots)
    runner.capture()
    return runner


def drive(tts: Qwen3TTS, runner: ModelRunner, streams: list[Stream], greedy: bool = True, max_rows: int = 16,
          forced: Callable[[Stream], np.ndarray | None] | None = None,
          config: SchedulerConfig | None = None,
          on_step: Callable[[StepOutput], None] | None = None) -> RecordingRunner:
    """Run the streams through an EngineCore until all end: each joins at its step, some are cancelled; `on_step`
    sees every step's output."""
    recorder = RecordingRunner(runner)
    config = config or SchedulerConfig(max_rows=max_rows, max_prefill_tokens=64, urgent_s=0)
    core = EngineCore(recorder, runner.kv, config)
    gen = tts.cfg.generation.greedy() if greedy else tts.cfg.generation
    step = 0
    while step < 10_000:
        for s in streams:
            if s.join_step == step:
                inputs = tts.prompt_inputs(s.text, s.speaker, "english", non_streaming=s.non_streaming)
                rows = prompt_rows(tts.cfg, inputs)
                s.request = Request(rows, len(rows), s.budget, s.schedule, param_row(gen))
                if forced is not None and (codes := forced(s)) is not None:
                    assert isinstance(runner, TeacherForcedRunner), "forced codes need make_runner(record_logits=True)"
                    runner.forced_codes[s.request.request_id] = codes
                core.add(s.request)
            if s.cancel_step == step and s.request is not None:
                core.abort(s.request)
        if not core.has_work and all(s.join_step <= step for s in streams):
            break
        out = core.step()
        if on_step is not None:
            on_step(out)
        for request, pcm in out.chunks:
            next(s for s in streams if s.request is request).audio.append(pcm)
        step += 1
    assert not core.has_work, "streams did not finish"
    return recorder


def solo_codes(tts: Qwen3TTS, s: Stream) -> np.ndarray:
    """The stream alone through the eager batch-1 path (greedy): [N, Q]."""
    prompt = tts.build(tts.prompt_inputs(s.text, s.speaker, "english", non_streaming=s.non_streaming))
    return tts.generate_codes(prompt, tts.cfg.generation.greedy(), s.budget).cpu().numpy()


@torch.inference_mode()
def solo_logits(tts: Qwen3TTS, s: Stream, codes: np.ndarray) -> list[list[torch.Tensor]]:
    """Teacher-forced eager batch-1 run over `codes`: per frame, the fp32 logits of codebook 0 (after the penalty,
    EOS and suppression rules) and of codebooks 1..15, as the reference computes them."""
    prompt = tts.build(tts.prompt_inputs(s.text, s.speaker, "english", non_streaming=s.non_streaming))
    talker, rules = tts.talker, tts.rules
    gen = tts.cfg.generation
    rules.penalty, rules.min_new_tokens = gen.repetition_penalty, 2
    embeds = prompt.embeds[None]
    cache = talker.new_cache(1, embeds.shape[1] + len(codes) + 1, embeds.dtype, embeds.device)
    hidden = talker(embeds, cache)[:, -1]
    previous = torch.empty((1, 0), dtype=torch.long, device=tts.device)
    out = []
    for step, frame_np in enumerate(codes):
        frame = torch.as_tensor(frame_np, device=tts.device)[None]
        row = [rules.apply(talker.codec_head(hidden).float(), previous).clone()]

        def pick(lg: torch.Tensor, row: list[torch.Tensor] = row, frame: torch.Tensor = frame) -> torch.Tensor:
            row.append(lg.clone())
            return frame[:, len(row) - 1]

        talker.code_predictor.predict(hidden, talker.codec_embed(frame[:, 0]), pick)
        out.append([lg[0] for lg in row])
        text = prompt.trailing[step] if step < prompt.trailing.shape[0] else prompt.tts_pad
        hidden = talker((talker.frame_embed(frame) + text)[:, None], cache)[:, -1]
        previous = torch.cat([previous, frame[:, :1]], dim=1)
    return out

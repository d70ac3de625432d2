"""Teacher forcing, for the tests only: a ModelRunner whose rows take given codes instead of their samples and
that keeps every step's logits, so each stream of a batched step can be compared with the eager batch-1 path."""

from __future__ import annotations

import numpy as np
import torch
from voxgate.engine.qwen3tts.batch_step import SampledRows
from voxgate.engine.qwen3tts.model.generate import Qwen3TTS
from voxgate.engine.qwen3tts.runner import ModelRunner, RunnerConfig
from voxgate.engine.request import Request


class TeacherForcedRunner(ModelRunner):
    """Rows whose request has codes in `forced_codes` (request_id -> [N, Q]) take them instead of their samples
    (decode rows and a prompt's first frame alike);
    each launched step carries its logits (eager only)."""

    records_logits = True

    def __init__(self, tts: Qwen3TTS, config: RunnerConfig | None = None, num_slots: int | None = None) -> None:
        super().__init__(tts, config, num_slots)
        self.forced_codes: dict[int, np.ndarray] = {}

    def _extra_inputs(self, rows: int) -> dict[str, tuple[int, ...]]:
        return {"forced": (rows, self.num_codes), "force": (rows,)}

    def _sampled_rows(self, d: dict[str, torch.Tensor]) -> SampledRows:
        return SampledRows(d["row_slot"], d["row_frame"], d["row_text"], d["forced"], d["force"] != 0)

    def _fill_rows(self, sampled: list[Request], at: list[int], h: dict[str, np.ndarray]) -> None:
        for i, r in zip(at, sampled, strict=True):
            codes = self.forced_codes.get(r.request_id)
            if codes is not None and r.num_launched < len(codes):
                h["forced"][i], h["force"][i] = codes[r.num_launched], 1

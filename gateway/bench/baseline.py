"""The baseline arm: the reference implementation (`qwen-tts` 0.1.1, Hugging Face generate) at batch 1, on the same
checkpoint and GPU as the gateway. It reports the time to the whole utterance and audio-s/s, the floor a user would
otherwise start from. The frame budget of the length rule becomes `max_new_tokens` (random weights never emit the
end token, so every utterance has exactly its budget)."""

from __future__ import annotations

import argparse
import importlib
import importlib.machinery
import json
import statistics
import sys
import time
import types
from pathlib import Path
from typing import Any

from .workload import LENGTH_RULE, Workload, frame_budget

# qwen_tts imports these at package import; generation from text with a built-in speaker uses none of them
STUBBED = ("sox", "torchaudio", "torchaudio.compliance", "torchaudio.compliance.kaldi", "librosa", "librosa.filters")


def _unavailable(name: str) -> Any:
    def call(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{name} is stubbed out by voxgate bench baseline")

    return call


def _stub(name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, loader=None)  # find_spec() callers need one

    def attribute(attr: str) -> Any:  # `from stub import anything` gets a function that raises when called
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _unavailable(f"{name}.{attr}")

    module.__getattr__ = attribute  # type: ignore[method-assign]
    return module


def stub_audio_modules() -> list[str]:
    """Placeholder modules in sys.modules: sox, torchaudio, librosa; soundfile, onnxruntime, einops when missing."""
    stubbed = []
    for name in STUBBED:
        if name not in sys.modules:
            sys.modules[name] = _stub(name)
            stubbed.append(name)
    sys.modules["librosa"].filters = sys.modules["librosa.filters"]  # type: ignore[attr-defined]
    sys.modules["torchaudio"].compliance = sys.modules["torchaudio.compliance"]  # type: ignore[attr-defined]
    sys.modules["torchaudio.compliance"].kaldi = sys.modules["torchaudio.compliance.kaldi"]  # type: ignore[attr-defined]
    for name in ("soundfile", "onnxruntime", "einops"):  # audio I/O and the 25 Hz tokenizer only: stubbed if missing
        try:
            importlib.import_module(name)
        except Exception:
            sys.modules[name] = _stub(name)
            stubbed.append(name)
    return stubbed


class Reference:
    """The reference model loaded once; `speak(text, frames)` returns (audio seconds, wall seconds)."""

    def __init__(self, checkpoint: str, device: str = "cuda:0", dtype: str = "bfloat16") -> None:
        self.stubbed = stub_audio_modules()
        import torch
        from qwen_tts import Qwen3TTSModel

        self.torch = torch
        self.device = device
        t0 = time.perf_counter()
        placement = {} if device == "cpu" else {"device_map": device}  # device_map needs accelerate (GPU image)
        self.tts = Qwen3TTSModel.from_pretrained(
            checkpoint, dtype=getattr(torch, dtype), attn_implementation="sdpa", **placement
        )
        self.load_s = time.perf_counter() - t0
        self.kind = self.tts.model.tts_model_type
        speakers = self.tts.get_supported_speakers() or []
        self.speaker = "ryan" if "ryan" in speakers else (speakers[0] if speakers else None)
        languages = self.tts.get_supported_languages() or []
        self.language = "english" if "english" in [x.lower() for x in languages] else "auto"

    def _sync(self) -> None:
        if self.device.startswith("cuda"):
            self.torch.cuda.synchronize()

    def speak(self, text: str, frames: int, seed: int = 0) -> tuple[float, float]:
        # The reference samples: a seed per utterance makes a run repeatable (and an early EOS, which random weights
        # draw now and then, the same on every run).
        self.torch.manual_seed(seed)
        self._sync()
        t0 = time.perf_counter()
        if self.kind == "custom_voice":
            wavs, sr = self.tts.generate_custom_voice(
                text=text, speaker=self.speaker, language=self.language, max_new_tokens=frames
            )
        elif self.kind == "voice_design":
            wavs, sr = self.tts.generate_voice_design(
                text=text, instruct="A clear, calm voice.", language=self.language, max_new_tokens=frames
            )
        else:
            raise ValueError(f"baseline supports custom_voice and voice_design checkpoints, not {self.kind!r}")
        self._sync()
        wall = time.perf_counter() - t0
        return len(wavs[0]) / sr, wall

    def describe(self) -> dict[str, Any]:
        import transformers

        info = {
            "implementation": "qwen-tts " + _version("qwen-tts"),
            "torch": self.torch.__version__,
            "transformers": transformers.__version__,
            "device": self.device,
            "kind": self.kind,
            "speaker": self.speaker,
            "language": self.language,
            "load_s": self.load_s,
            "stubbed_modules": self.stubbed,
        }
        if self.device.startswith("cuda"):
            info["gpu"] = self.torch.cuda.get_device_name(self.device)
        info["dtype"] = str(next(self.tts.model.parameters()).dtype)
        return info


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "unknown"


def run_baseline(
    checkpoint: str,
    workloads: list[str],
    runs: int = 5,
    device: str = "cuda:0",
    dtype: str = "bfloat16",
    warmup: int = 2,
    log: Any = print,
) -> dict[str, Any]:
    """Warm up, then `runs` utterances per workload at batch 1; medians per workload, every run kept."""
    try:
        ref = Reference(checkpoint, device, dtype)
    except Exception as exc:  # the reference is optional: its absence is reported, not fatal
        return {"error": f"{type(exc).__name__}: {exc}"}
    result: dict[str, Any] = {**ref.describe(), "checkpoint": checkpoint, "length_rule": LENGTH_RULE}
    result["runs"], result["summary"] = [], {}
    first = True
    for name in workloads:
        workload = Workload.load(name)
        order = workload.order(seed=1)
        for k in range(warmup):  # the first call of the process is the cold start, reported apart
            text = workload.texts[order[k]]
            audio_s, wall = ref.speak(text, frame_budget(text))
            if first:
                result["cold_first_call_s"], first = wall, False
        rows = []
        for k in range(runs):
            i = order[(warmup + k) % len(order)]
            text = workload.texts[i]
            audio_s, wall = ref.speak(text, frame_budget(text), seed=k)
            rows.append(
                {
                    "workload": name,
                    "text_index": i,
                    "frames": frame_budget(text),
                    "audio_s": audio_s,
                    "wall_s": wall,
                    "audio_s_per_s": audio_s / wall,
                }
            )
            log(f"baseline {name} #{k}: {audio_s:.2f} s audio in {wall:.3f} s ({audio_s / wall:.2f} audio-s/s)")
        result["runs"] += rows
        result["summary"][name] = {
            "runs": len(rows),
            "audio_s": statistics.median(r["audio_s"] for r in rows),
            "wall_s": statistics.median(r["wall_s"] for r in rows),
            "audio_s_per_s": statistics.median(r["audio_s_per_s"] for r in rows),
            "wall_s_spread": [min(r["wall_s"] for r in rows), max(r["wall_s"] for r in rows)],
        }
    return result


def baseline_main(args: argparse.Namespace) -> int:
    result = run_baseline(
        args.checkpoint, args.workload or ["sentences"], args.runs, args.device, args.dtype, args.warmup
    )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "baseline.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result.get("summary") or result, indent=1))
    return 1 if "error" in result else 0

"""The aligner's features, the host-built gather index and one copy per clip (main before, features_old) against
the device-built index and one copy for all clips (this tree): the features alone and whole aligner calls
(encoder and decoder captured as in the engine), 3-s clips, bf16; the features' largest difference.

Run as call C ran it (cC.sh): main's engine/aligner/features.py copied to engine/aligner/features_old.py, then
`python3 cmp_features.py ALIGNER_DIR OUT.json [cuda|cpu]`. (Reformatted to the linter after the run; the same code.)
"""

import json
import statistics
import sys
import time
from collections.abc import Callable

import torch
from voxgate.engine.aligner import align as align_mod
from voxgate.engine.aligner import features as new
from voxgate.engine.aligner import features_old as old  # type: ignore[attr-defined]
from voxgate.engine.aligner.align import Aligner
from voxgate.engine.aligner.bench import make_inputs

dev = torch.device(sys.argv[3] if len(sys.argv) > 3 else "cuda")


def sync() -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize()


def ms(fn: Callable[[], object], runs: int = 7) -> float:
    for _ in range(2):
        fn()
    times = []
    for _ in range(runs):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - t0) * 1e3)
    return round(statistics.median(times), 3)


def old_copies(clips: list, device: torch.device) -> list[torch.Tensor]:
    return [torch.as_tensor(old.peak_limited(c), device=device) for c in clips]


def old_path(clips: list) -> tuple[torch.Tensor, list[int]]:
    return old.log_mel_batch(old_copies(clips, dev))


def new_path(clips: list) -> tuple[torch.Tensor, list[int]]:
    return new.log_mel_batch(new.clips_on_device(clips, dev))


def compare(aligner: Aligner, batch: int) -> dict[str, object]:
    clips, texts = make_inputs(batch, 3.0, seed=batch)
    (mel_old, frames_old), (mel_new, frames_new) = old_path(clips), new_path(clips)
    row: dict[str, object] = dict(batch=batch, frames_equal=frames_old == frames_new,
                                  max_diff=float((mel_old - mel_new).abs().max()),
                                  features_old_ms=ms(lambda: old_path(clips)),
                                  features_new_ms=ms(lambda: new_path(clips)))
    with torch.inference_mode():
        row["call_new_ms"] = ms(lambda: aligner.unit_times_batch(clips, texts))
        align_mod.log_mel_batch, align_mod.clips_on_device = old.log_mel_batch, old_copies
        try:
            row["call_old_ms"] = ms(lambda: aligner.unit_times_batch(clips, texts))
        finally:
            align_mod.log_mel_batch, align_mod.clips_on_device = new.log_mel_batch, new.clips_on_device
    row["ms_per_audio_s_old"] = round(float(row["call_old_ms"]) / (3 * batch), 4)
    row["ms_per_audio_s_new"] = round(float(row["call_new_ms"]) / (3 * batch), 4)
    return row


def main() -> None:
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    aligner = Aligner.from_pretrained(sys.argv[1], device=dev, dtype=dtype)
    if dev.type == "cuda":
        aligner.capture(progress=False, decoder_graphs=True, encoder_graphs=True)
    out = []
    for batch in (1, 32, 128) if dev.type == "cuda" else (1, 4):
        out.append(compare(aligner, batch))
        print(json.dumps(out[-1]), flush=True)
    name = torch.cuda.get_device_name() if dev.type == "cuda" else "cpu"
    with open(sys.argv[2], "w") as f:
        json.dump(dict(device=name, results=out), f, indent=2)


main()

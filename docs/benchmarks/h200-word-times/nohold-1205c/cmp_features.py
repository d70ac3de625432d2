"""The aligner's features, the host-built gather index and one copy per clip (main before, features_old) against
the device-built index and one copy for all clips (this tree): the features alone and whole aligner calls
(encoder and decoder captured as in the engine), 3-s clips, bf16; the features' largest difference."""
import json, sys, statistics, time
import torch
from voxgate.engine.aligner import align as align_mod, features as new, features_old as old
from voxgate.engine.aligner.align import Aligner
from voxgate.engine.aligner.bench import make_inputs

dev = torch.device(sys.argv[3] if len(sys.argv) > 3 else "cuda")
sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
def ms(fn, runs=7):
    for _ in range(2): fn()
    t = []
    for _ in range(runs):
        sync(); t0 = time.perf_counter(); fn(); sync(); t.append((time.perf_counter() - t0) * 1e3)
    return round(statistics.median(t), 3)

aligner = Aligner.from_pretrained(sys.argv[1], device=dev, dtype=torch.bfloat16 if dev.type == "cuda" else torch.float32)
if dev.type == "cuda":
    aligner.capture(progress=False, decoder_graphs=True, encoder_graphs=True)
def old_path(clips):
    return old.log_mel_batch([torch.as_tensor(old.peak_limited(c), device=dev) for c in clips])
def new_path(clips):
    return new.log_mel_batch(new.clips_on_device(clips, dev))
out = []
for batch in ((1, 32, 128) if dev.type == 'cuda' else (1, 4)):
    clips, texts = make_inputs(batch, 3.0, seed=batch)
    (mo, fo), (mn, fn_) = old_path(clips), new_path(clips)
    row = dict(batch=batch, frames_equal=fo == fn_, max_diff=float((mo - mn).abs().max()),
               features_old_ms=ms(lambda: old_path(clips)), features_new_ms=ms(lambda: new_path(clips)))
    with torch.inference_mode():
        row["call_new_ms"] = ms(lambda: aligner.unit_times_batch(clips, texts))
        align_mod.log_mel_batch, align_mod.clips_on_device = old.log_mel_batch, lambda cs, d: [torch.as_tensor(old.peak_limited(c), device=d) for c in cs]
        try:
            row["call_old_ms"] = ms(lambda: aligner.unit_times_batch(clips, texts))
        finally:
            align_mod.log_mel_batch, align_mod.clips_on_device = new.log_mel_batch, new.clips_on_device
    row["ms_per_audio_s_old"] = round(row["call_old_ms"] / (3 * batch), 4)
    row["ms_per_audio_s_new"] = round(row["call_new_ms"] / (3 * batch), 4)
    print(json.dumps(row), flush=True)
    out.append(row)
json.dump(dict(device=torch.cuda.get_device_name() if dev.type == 'cuda' else 'cpu', results=out), open(sys.argv[2], "w"), indent=2)

"""`voxgate synth "text" --model DIR --voice ryan -o out.wav`: offline eager Qwen3-TTS generation.

No torch import at module import time: `voxgate --help` stays fast.
"""

from __future__ import annotations

import argparse
import sys
import time


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("text")
    parser.add_argument("--model", required=True, help="checkpoint directory or Hugging Face repo id")
    parser.add_argument("--voice", default=None, help="CustomVoice speaker (e.g. ryan)")
    parser.add_argument("--language", default="auto")
    parser.add_argument("--instruct", default=None, help="style instruction (1.7B CustomVoice, VoiceDesign)")
    parser.add_argument("--ref-audio", default=None, help="Base: 16-bit WAV of the voice to clone (any rate: "
                        "resampled to 24 kHz); alone it gives the x-vector voice")
    parser.add_argument("--ref-text", default=None, help="Base: the transcript of --ref-audio: clone in context "
                        "(the reference audio's codec codes condition the generation)")
    parser.add_argument("-o", "--output", required=True, help="output WAV (24 kHz mono 16-bit)")
    parser.add_argument("--max-frames", type=int, default=None, help="frame budget (12.5 frames per second)")
    parser.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    parser.add_argument("--dtype", default=None, help="bf16 | fp16 | fp32 (default: bf16 on cuda, fp32 on cpu)")
    parser.add_argument("--greedy", action="store_true", help="argmax instead of sampling (both levels)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--text-per-frame", action="store_true", help="streaming-text prompt layout")


def run(args: argparse.Namespace) -> int:
    import torch

    from ..model.generate import Qwen3TTS, Voice
    from ..model.prompt import PromptError
    from .wav import read_wav, write_wav

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = args.dtype or ("bf16" if device.startswith("cuda") else "fp32")
    print(f"loading {args.model} on {device} ({dtype})", file=sys.stderr)
    model = Qwen3TTS.from_pretrained(args.model, device=device, dtype=dtype)
    gen = model.cfg.generation.greedy() if args.greedy else model.cfg.generation
    voice = Voice(speaker=args.voice)
    try:
        if args.ref_text and not args.ref_audio:
            raise PromptError("--ref-text needs --ref-audio")
        if args.ref_audio:
            audio, sr = read_wav(args.ref_audio)
            voice = model.clone_voice(audio, sr, ref_text=args.ref_text)
        inputs = model.prompt_inputs(args.text, voice, args.language, args.instruct,
                                     non_streaming=False if args.text_per_frame else None)
    except PromptError as exc:
        print(f"voxgate synth: {exc}", file=sys.stderr)
        return 2
    generator = torch.Generator(model.device).manual_seed(args.seed) if args.seed is not None else None
    start = time.perf_counter()
    frames = []
    for i, frame in enumerate(model.frames(model.build(inputs), gen, args.max_frames, generator), start=1):
        frames.append(frame)
        if i % 25 == 0:
            print(f"  {i} frames ({i / 12.5:.1f} s of audio)", file=sys.stderr)
    codes = torch.stack(frames) if frames else torch.empty((0, 16), dtype=torch.long)
    gen_s = time.perf_counter() - start
    audio = model.decode(codes, voice.ref_codes)  # ICL: decoded after the reference frames, then cut
    total_s = time.perf_counter() - start
    write_wav(args.output, audio)
    seconds = len(audio) / 24_000
    print(f"wrote {args.output}: {len(frames)} frames, {seconds:.2f} s of audio; generation {gen_s:.2f} s, "
          f"with decode {total_s:.2f} s ({seconds / max(total_s, 1e-9):.2f} audio-s/s)", file=sys.stderr)
    return 0

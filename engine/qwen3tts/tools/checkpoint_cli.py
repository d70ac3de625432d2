"""`voxgate checkpoint synth`: write a synthetic Qwen3-TTS checkpoint (real configs, random weights).

No torch import at module import time: `voxgate --help` stays fast.
"""

from __future__ import annotations

import argparse
import sys
import time


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    p = sub.add_parser("synth", help="write a synthetic checkpoint in the official layout")
    p.add_argument("--like", required=True, help="official checkpoint name, e.g. Qwen3-TTS-12Hz-1.7B-CustomVoice")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tiny", action="store_true", help="shrink layers and widths for CPU tests")
    p.add_argument("--shared", default=None, help="take configs and tokenizer from this shared data root only "
                   "(default: "
                   "the Hub's Qwen/<NAME> when online, else $VOXGATE_SHARED or <repo>/../shared)")
    p.add_argument("--device", default="cpu", help="device that draws the random weights (cuda is much faster)")
    p.add_argument("--shard-mb", type=int, default=0, help="split model.safetensors into shards of this size")
    p.add_argument("--no-encoder", action="store_true",
                   help="omit the codec encoder tensors (no encoding of reference audio for in-context cloning)")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from tqdm.auto import tqdm

    from .synthetic import write_synthetic

    start = time.perf_counter()
    with tqdm(desc="writing tensors", unit="tensor") as bar:
        try:
            out = write_synthetic(
                args.like, args.out, seed=args.seed, tiny=args.tiny,
                shared=Path(args.shared) if args.shared else None, device=args.device,
                shard_bytes=args.shard_mb << 20 if args.shard_mb else None, with_encoder=not args.no_encoder,
                progress=lambda _name: bar.update(),
            )
        except FileNotFoundError as exc:
            print(f"voxgate checkpoint synth: {exc}", file=sys.stderr)
            return 2
    print(f"wrote {out} in {time.perf_counter() - start:.1f} s")
    return 0

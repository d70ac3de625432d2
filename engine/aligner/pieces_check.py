"""`python -m voxgate.engine.aligner.pieces_check`: a recording's word times aligned in pieces, as the engine aligns a
sentence while it is made (stream.py), against the same recording aligned whole.

Pieces rest on one assumption (docs/aligner.md, "What pieces assume"): that the aligner times a word in a clip cut
`--margin-ms` after the word's end as it would in the whole sentence. Random weights cannot say whether a trained
aligner does; this says it for a real checkpoint and a real recording of speech:

    python -m voxgate.engine.aligner.pieces_check --checkpoint Qwen/Qwen3-ForcedAligner-0.6B \\
        --wav sentence.wav --text "The birch canoe slid on the smooth planks."

The recording goes through `AlignedStream` in 80-ms chunks with an aligner answering each piece at once and the
listener never ahead (a piece every group, the most pieces a sentence gets); it prints each word's times both
ways, the pieces' clips, and the largest difference.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import wave
from collections.abc import AsyncIterator
from dataclasses import dataclass

import numpy as np
import soxr

from ..base import SAMPLE_RATE, AudioStream, SynthesisRequest
from ..words import WordTime
from .align import Aligner
from .stream import AlignedStream
from .worker import AlignJob

CHUNK = SAMPLE_RATE * 80 // 1000  # one codec frame


class _Recording(AudioStream):
    def __init__(self, pcm: np.ndarray, text: str) -> None:
        self.request = SynthesisRequest(text, word_times=True)
        self.pcm = pcm

    def cancel(self) -> None:
        pass

    async def __aiter__(self) -> AsyncIterator[np.ndarray]:
        for start in range(0, len(self.pcm), CHUNK):
            await asyncio.sleep(0)  # the stream's loop runs between chunks, as between a stream's steps
            yield self.pcm[start: start + CHUNK]


@dataclass
class _AtOnce:
    """The worker's `submit`, answered in the caller's thread; `clips` records each call's (samples, text)."""

    aligner: Aligner
    clips: list[tuple[int, str]]

    def submit(self, job: AlignJob) -> None:
        self.clips.append((len(job.audio), job.text))
        job.deliver(self.aligner.align(job.audio, job.text), None)


async def in_pieces(aligner: Aligner, pcm: np.ndarray, text: str, group_ms: int,
                    margin_ms: int) -> tuple[list[WordTime], list[tuple[int, str]]]:
    """`pcm` (24 kHz int16, as an engine stream yields it) as a word-times stream aligned in pieces -> its words and
    each call's clip (samples, text)."""
    worker = _AtOnce(aligner, [])
    stream = AlignedStream(_Recording(pcm, text), worker, group_samples=group_ms * SAMPLE_RATE // 1000,  # type: ignore[arg-type]
                           margin_samples=margin_ms * SAMPLE_RATE // 1000, ahead_samples=len(pcm) + 1,
                           clock=lambda: 0.0)
    words: list[WordTime] = []
    async for _ in stream:
        words += stream.take_words()
    return words, worker.clips


def report(whole: list[WordTime], pieces: list[WordTime], clips: list[tuple[int, str]]) -> list[str]:
    def ms(samples: int) -> str:
        return f"{samples * 1000 / SAMPLE_RATE:8.1f}"

    lines = [f"{len(clips)} aligner calls: " + ", ".join(f"{n * 1000 // SAMPLE_RATE} ms / {len(t.split())} words"
                                                          for n, t in clips),
             f"{'word':24s} {'whole start':>11s} {'end':>8s} {'pieces start':>12s} {'end':>8s} {'d start':>8s}"]
    for w, p in zip(whole, pieces, strict=True):
        lines.append(f"{w.word[:24]:24s} {ms(w.start):>11s} {ms(w.end)} {ms(p.start):>12s} {ms(p.end)} "
                     f"{ms(p.start - w.start)}")
    worst = max((abs(p.start - w.start) for w, p in zip(whole, pieces, strict=True)), default=0)
    lines.append(f"largest start difference: {worst * 1000 / SAMPLE_RATE:.1f} ms over {len(whole)} words")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m voxgate.engine.aligner.pieces_check", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", required=True, help="aligner checkpoint folder or Hugging Face repo id")
    p.add_argument("--wav", required=True, help="a 16-bit WAV of the text spoken (any rate, mono or not)")
    p.add_argument("--text", required=True, help="what the recording says")
    p.add_argument("--group-ms", type=int, default=1000, help="the engine option aligner_group_ms (default 1000)")
    p.add_argument("--margin-ms", type=int, default=240, help="the engine option aligner_margin_ms (default 240)")
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    args = p.parse_args(argv)
    from ..qwen3tts.tools.wav import read_wav, to_int16

    try:
        audio, rate = read_wav(args.wav)
    except (OSError, ValueError, EOFError, wave.Error) as exc:
        print(f"pieces_check: cannot read {args.wav}: {exc}", file=sys.stderr)
        return 2
    pcm = to_int16(soxr.resample(audio, rate, SAMPLE_RATE) if rate != SAMPLE_RATE else audio)
    aligner = Aligner.from_pretrained(args.checkpoint, device=args.device, progress=True)
    whole = aligner.align(pcm.astype(np.float32) / 32768.0, args.text)  # what the stream hands the aligner
    pieces, clips = asyncio.run(in_pieces(aligner, pcm, args.text, args.group_ms, args.margin_ms))
    print("\n".join(report(whole, pieces, clips)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

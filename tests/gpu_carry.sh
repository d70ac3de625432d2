#!/usr/bin/env bash
# What a device call carries, built once in a checkout (all four folders are in .gitignore; docs/gpu-notes.md):
#   .whl         the gateway's dependencies the GPU image lacks, as Python 3.12 wheels, and Debian's libopus.so.0
#   .gpu_shared  a copy of shared/'s configs, tokenizer files and workloads (VOXGATE_SHARED, default ../shared)
#   .tcache      Triton's cache, from an earlier call's $OUT: `bash tests/gpu_carry.sh DIR` with DIR holding
#                triton.tar.gz.part-* (without it the first server of a call tunes the codec's tiles cold)
#   .baseline    with BASELINE=<commit>: that commit's tree for gpu_aligner.sh's bench (.baseline/<commit>.tar.gz)
# Safe to run again: what exists is kept (the cache is replaced when DIR is given).
set -euo pipefail
cd "$(dirname "$0")/.."
SHARED=${VOXGATE_SHARED:-../shared}
if [ ! -f .whl/libopus.so.0 ]; then
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 \
    --platform any -d .whl starlette uvicorn websockets soxr espeakng-loader prometheus-client httpx httpcore h11 \
    anyio sniffio idna certifi msgspec click
  python3 -m pip wheel -q --no-deps -w .whl opuslib  # published as a source archive only
  cp -L /usr/lib/x86_64-linux-gnu/libopus.so.0 .whl/  # Debian's libopus0 (apt-get install libopus0): the GPU host has none
fi
if [ ! -d .gpu_shared/qwen3-tts ]; then
  mkdir -p .gpu_shared/qwen3-tts
  cp -r "$SHARED"/qwen3-tts/checkpoints "$SHARED"/qwen3-tts/text-tokenizer .gpu_shared/qwen3-tts/
  cp -r "$SHARED"/workloads .gpu_shared/
fi
if [ -n "${1:-}" ]; then
  mkdir -p .tcache && rm -f .tcache/triton.tar.gz && cat "$1"/triton.tar.gz.part-* > .tcache/triton.tar.gz
fi
if [ -n "${BASELINE:-}" ] && [ ! -f ".baseline/$BASELINE.tar.gz" ]; then
  mkdir -p .baseline && git archive "$BASELINE" engine kernels gateway web configs | gzip > ".baseline/$BASELINE.tar.gz"
fi
du -sh .whl .gpu_shared .tcache .baseline 2>/dev/null || true

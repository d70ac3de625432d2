#!/usr/bin/env bash
# 2026-12-07 twentieth session, with ~500 s of device time left, from the repo root:
#   run(command="bash docs/benchmarks/card-1207/call6.sh", carry=[".whl", ".gpu_shared", ".tcache"], timeout_s=330)
# On an H200: issue 27's closed loop on the defaults, c = 1 / 8 / 128 / 256, and idle first audio (open, 1 req/s),
# one in-process server (no SLO capacity, no cold start, no tests: call3.sh's ~550 s).
# Elsewhere: the aligner's `gpu` tests (tests/aligner/gpu_aligner.sh's tests stage), not run since the windows'
# layout moved to numpy and the clips are cast once (nineteenth session).
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "device: $GPU"
case $GPU in
  *H200*) STAGES=variants VARIANT_C=1,8,128,256 VARIANT_RATES=1 VARIANT_S=${VARIANT_S:-260} VARIANTS="card:" \
            bash tests/qwen3tts/gpu_loop.sh 2>&1 | grep -E "closed s|open s|variant|H200" | tail -8 ;;
  *) STAGES=tests ELAPSED_CAP=200 bash tests/aligner/gpu_aligner.sh 2>&1 | tail -12 ;;
esac

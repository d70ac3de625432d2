#!/usr/bin/env bash
# 2026-12-07 nineteenth session, with under 300 s of device time left: issue 27's closed loop alone on the defaults,
# only on an H200 (the card's other points need call3.sh's ~550 s), from the repo root:
#   run(command="bash docs/benchmarks/card-1207/call5.sh", carry=[".whl", ".gpu_shared", ".tcache"], timeout_s=280)
# Closed loop c = 1 / 8 / 128, sentences, 10 s each, one server on the defaults; no open loop, no tests.
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "device: $GPU"
case $GPU in *H200*) ;; *) echo "not an H200: nothing run (the H100's numbers are on record)"; exit 0 ;; esac
STAGES=variants VARIANT_C=1,8,128 VARIANT_RATES="" VARIANT_S=${VARIANT_S:-220} VARIANTS="card:" \
  bash tests/qwen3tts/gpu_loop.sh 2>&1 | grep -E "closed s|variant|checkpoint|H200" | tail -8

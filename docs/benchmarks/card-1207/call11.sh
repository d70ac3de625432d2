#!/usr/bin/env bash
# 2026-12-07 twenty-third session, the first call, from the repo root:
#   run(command="bash docs/benchmarks/card-1207/call11.sh", carry=[".whl", ".gpu_shared", ".tcache"], timeout_s=590)
# On an H200: issue 27's whole card on the defaults (call3.sh: the GPU loop tests, SLO capacity, closed loop,
# cold start; ~9 min). Elsewhere: not-held clips gathered into fuller aligner calls (aligner_gather_ms = 120) against
# the defaults, each server's capacity search starting below the knee (180 req/s: a fresh server's first window at
# 240-270 spiked in three of four arms, h200-word-times/README.md), stages stop starting at ELAPSED_CAP.
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "device: $GPU"
case $GPU in
  *H200*) exec bash docs/benchmarks/card-1207/call3.sh ;;
  *) RATES=${RATES:-180,240,270} DEFAULTS_RATES=${DEFAULTS_RATES:-180,240,270} ELAPSED_CAP=${ELAPSED_CAP:-440} \
       exec bash docs/benchmarks/h200-word-times/gather-1207u/call.sh ;;
esac

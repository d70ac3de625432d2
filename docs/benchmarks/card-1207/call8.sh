#!/usr/bin/env bash
# 2026-12-07 twenty-first session, the last call (~630 s of device time left, a start included), from the repo root:
#   run(command="bash docs/benchmarks/card-1207/call8.sh", carry=[".whl", ".gpu_shared", ".tcache"], timeout_s=500)
# On an H200: issue 27's closed loop on the defaults, c = 1 / 8 / 128 / 256, and idle first audio (call6.sh's H200
# branch; the whole card, call3.sh's ~550 s, no longer fits). Elsewhere: word times not held, not-held clips gathered
# into fuller aligner calls against the defaults (h200-word-times/gather-1207u/call.sh, stages stop starting at
# ELAPSED_CAP, 370 s).
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "device: $GPU"
case $GPU in
  *H200*) exec bash docs/benchmarks/card-1207/call6.sh ;;
  *) ELAPSED_CAP=${ELAPSED_CAP:-370} exec bash docs/benchmarks/h200-word-times/gather-1207u/call.sh ;;
esac

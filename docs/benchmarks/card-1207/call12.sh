#!/usr/bin/env bash
# Prepared in the twenty-third session (2026-12-07, no device lent) as the next session's first call, from the repo root:
#   run(command="bash docs/benchmarks/card-1207/call12.sh", carry=[".whl", ".gpu_shared", ".tcache"], timeout_s=590)
# On an H200: issue 27's whole card on the defaults (call3.sh: the GPU loop tests, SLO capacity, closed loop, cold
# start; ~9 min), never run on an H200. Elsewhere: issue 28's next step, a sentence aligned whole with its clips
# gathered into fuller calls against the defaults (h200-word-times/whole-gather-1207w/call.sh), stages stop
# starting at ELAPSED_CAP.
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "device: $GPU"
case $GPU in
  *H200*) exec bash docs/benchmarks/card-1207/call3.sh ;;
  *) ELAPSED_CAP=${ELAPSED_CAP:-440} exec bash docs/benchmarks/h200-word-times/whole-gather-1207w/call.sh ;;
esac

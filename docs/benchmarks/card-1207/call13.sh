#!/usr/bin/env bash
# Prepared in the twenty-fourth session (2026-12-07) as the next session's first call, from the repo root:
#   run(command="bash docs/benchmarks/card-1207/call13.sh", carry=[".whl", ".gpu_shared", ".tcache"], timeout_s=590)
# On an H200: issue 27's whole card on the defaults (call3.sh: the GPU loop tests, SLO capacity, closed loop, cold
# start; ~9 min), never run on an H200; then, as the second call, issue 28's new defaults there
# (h200-word-times/whole-gather-1207w/h200.sh). Elsewhere: the aligner in a process of its own under MPS against a
# thread, both on today's defaults (a not-held sentence aligned whole, calls gathered), searched from 180 req/s
# (h200-word-times/process-mps-rates-1207w/call.sh).
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "device: $GPU"
case $GPU in
  *H200*) exec bash docs/benchmarks/card-1207/call3.sh ;;
  *) exec bash docs/benchmarks/h200-word-times/process-mps-rates-1207w/call.sh ;;
esac

#!/usr/bin/env bash
# 2026-12-07 twenty-first session, the last call, from the repo root:
#   run(command="bash docs/benchmarks/card-1207/call8.sh", carry=[".whl", ".gpu_shared", ".tcache"])
# On an H200: issue 27's card on the defaults (call3.sh's H200 branch), never run on an H200 yet. Elsewhere: word
# times not held, not-held clips gathered into fuller aligner calls against the defaults
# (h200-word-times/gather-1207u/call.sh).
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "device: $GPU"
case $GPU in
  *H200*) exec bash docs/benchmarks/card-1207/call3.sh ;;
  *) exec bash docs/benchmarks/h200-word-times/gather-1207u/call.sh ;;
esac

#!/usr/bin/env bash
# 2026-12-07 twenty-second session, the first call, from the repo root:
#   run(command="bash docs/benchmarks/card-1207/call9.sh", carry=[".whl", ".gpu_shared", ".tcache"], timeout_s=590)
# 1. the MPS probe (h200-word-times/mps-probe/probe.sh, capped at 150 s): do two processes' kernels run side by side?
# 2. call8.sh: on an H200 issue 27's closed loop on the defaults; elsewhere not-held clips gathered into fuller
#    aligner calls against the defaults, stages stop starting at ELAPSED_CAP (300 s here).
timeout 150 bash docs/benchmarks/h200-word-times/mps-probe/probe.sh 2>&1 | tee "$OUT/mps-probe.txt"
echo quit | nvidia-cuda-mps-control 2>/dev/null || true
ELAPSED_CAP=${ELAPSED_CAP:-300} bash docs/benchmarks/card-1207/call8.sh

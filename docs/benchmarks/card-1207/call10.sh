#!/usr/bin/env bash
# 2026-12-07 twenty-second session (~1,100 s of device time left, a start included), from the repo root:
#   run(command="bash docs/benchmarks/card-1207/call10.sh", carry=[".whl", ".gpu_shared", ".tcache"], timeout_s=560)
# 1. the MPS probe again, its kernels now a fixed count of instructions (h200-word-times/mps-probe, capped at 150 s)
# 2. on an H200 only: issue 27's closed loop on the defaults, c = 1 / 8 / 128 / 256, and idle first audio
#    (call6.sh's H200 branch, ~5-6 min)
timeout 150 bash docs/benchmarks/h200-word-times/mps-probe/probe.sh 2>&1 | tee "$OUT/mps-probe.txt"
echo quit | nvidia-cuda-mps-control 2>/dev/null || true
case $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) in
  *H200*) bash docs/benchmarks/card-1207/call6.sh ;;
esac

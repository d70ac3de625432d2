#!/usr/bin/env bash
# Ran once, at 54d6f37 (twenty-second session; README "The aligner in a process of its own, under MPS"); the option
# aligner_process was removed again after it, so this script needs that commit.
# Prepared in the twenty-second session (2026-12-07): the aligner in a process of its own (engine option
# aligner_process = true) against a thread (the defaults), both servers under NVIDIA MPS, one tree, one card:
#   run(command="bash docs/benchmarks/h200-word-times/process-mps-1207v/call.sh", carry=[".whl", ".gpu_shared", ".tcache"], timeout_s=560)
# 0. the MPS probe (mps-probe/probe.sh, 150 s at most): without the daemon two processes' kernels should take twice
#    as long together as alone (time-sliced), under it about as long (side by side)
# 1. the MPS daemon started; a server with aligner_process = true: SLO capacity not held (RATES), closed c = 128
#    without word times and not held
# 2. a server on the defaults (the aligner in a thread), under the same daemon: the same rates, closed c = 128 not held
# Why: in a thread the aligner's calls are mostly host time in which its thread runs a quarter of the time (it
# waits for the GIL beside the loop's threads), and its own Python holds the GIL the loop's step needs; in 2026-12-06's
# process arm (no MPS) the GPU time-sliced the two contexts, which cost more than the GIL gave back.
# Expected: under MPS the process arm's c = 128 at or above the thread's (616 on a like card) and its aligner call
# time per second of speech lower (no GIL waits: host parts near their CPU time); capacity up a rate step at most,
# since the aligner's GPU work (~0.17 ms per s of speech against the loop's ~0.92) stays.
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "device: $GPU"; df -h /dev/shm | tail -1
timeout 150 bash docs/benchmarks/h200-word-times/mps-probe/probe.sh 2>&1 | tee "$OUT/mps-probe.txt"
echo quit | nvidia-cuda-mps-control 2>/dev/null; sleep 1
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d && echo "MPS daemon started for the servers" || echo "MPS daemon did not start"
case $GPU in *H200*) R0=240,270 ;; *) R0=180,240 ;; esac
STAGES=slo,report BENCH3S=0 NEW_SERVE="--engine-option aligner_process=true" RATES=${RATES:-$R0} BASE_RATES=none \
  REPORT=${REPORT:-"none-c128 nohold-c128"} DEFAULTS_ARM=1 DEFAULTS_RATES=${DEFAULTS_RATES:-$R0} \
  ELAPSED_CAP=${ELAPSED_CAP:-300} bash tests/aligner/gpu_aligner.sh
echo "MPS log:"; tail -5 "$CUDA_MPS_LOG_DIRECTORY"/control.log 2>/dev/null
echo quit | nvidia-cuda-mps-control

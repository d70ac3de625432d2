#!/usr/bin/env bash
# Prepared in the twenty-second session (2026-12-07): the engine's defaults (the aligner in a thread), word times not
# held, without and then under the NVIDIA MPS daemon, one tree, one card (~330 s; RATES=none ~260 s):
#   run(command="bash docs/benchmarks/h200-word-times/mps-thread-1207v/call.sh", carry=[".whl", ".gpu_shared", ".tcache"], timeout_s=450)
# Each arm: a server on the defaults, SLO capacity not held (RATES), closed c = 128 not held. Arm 1's files come back
# as $OUT/plain.tar.gz, arm 2's as $OUT/aligner.tar.gz.
# Why: under MPS the thread arm made 689.72 audio-s/s at c = 128 (process-mps-1207v) against 600-617 on earlier
# H100s without it. MPS runs one process's streams as without it, so expected: the same within a card's noise
# (a few %), and the 689.72 a faster card.
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "device: $GPU"
case $GPU in *H200*) R0=210,270,300 ;; *) R0=180,240,270 ;; esac  # a first rate below the knee (README)
arm() {  # RATES=none (the short form, ~260 s): closed c = 128 only
  if [ "${RATES:-}" = none ]; then STAGES=report BENCH3S=0 REPORT=nohold-c128 bash tests/aligner/gpu_aligner.sh
  else STAGES=slo,report BENCH3S=0 RATES=${RATES:-$R0} BASE_RATES=none REPORT=nohold-c128 ELAPSED_CAP=150 \
    bash tests/aligner/gpu_aligner.sh; fi 2>&1 | grep -v "triton.tar.gz.part"; }
echo "== arm 1: no MPS daemon"; arm
mv /tmp/aligner-results /tmp/aligner-plain; mv "$OUT/aligner.tar.gz" "$OUT/plain.tar.gz"
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d && echo "== arm 2: under the MPS daemon" || echo "== arm 2: the MPS daemon did not start"
arm
echo quit | nvidia-cuda-mps-control

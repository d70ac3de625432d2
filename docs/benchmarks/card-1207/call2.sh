#!/usr/bin/env bash
# session 1207 (fifteenth) call 2: where the step's time goes, on the defaults.
#   run(command="bash docs/benchmarks/card-1207/call2.sh", carry=[".whl", ".gpu_shared", ".tcache"])
# 1. `voxgate bench steps --profile` at row buckets 1, 8, 16, 128 and the 64-token prompt bucket (issue 27's
#    profile table: launches, GPU-busy time, gaps, bytes against the bandwidth floor)
# 2. a kernel trace of the server's own steps at c = 8 (engine/gpu_timeline.py, 250 steps after the first 1,000)
# 3. the aligner's GPU tests (tests/aligner/gpu_aligner.sh's tests stage)
OUT=${OUT:-/tmp/out}; T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
t steps
STAGES=stepvariants STEPV_S=${STEPV_S:-170} STEP_VARIANTS="card:" \
  STEPS_ARGS="--engine-option row_buckets=1,8,16,128 --engine-option prefill_buckets=64 --profile" \
  bash tests/qwen3tts/gpu_loop.sh 2>&1 | grep -v "triton cache\|^torch" | tail -14
t timeline
SKIP_CKPT=1 STAGES=variants VARIANT_C=8 VARIANT_RATES= VARIANT_S=110 VARIANTS="tl8:gpu_timeline=/tmp/res/tl8:1000:250" \
  bash tests/qwen3tts/gpu_loop.sh 2>&1 | grep -E "closed s|variant" | tail -4
ls /tmp/res/tl8 2>/dev/null | head
t aligner tests
OUT=$OUT STAGES=tests ELAPSED_CAP=150 bash tests/aligner/gpu_aligner.sh 2>&1 | tail -12
t end; tar -czf $OUT/results.tar.gz -C /tmp/res .; ls -la $OUT

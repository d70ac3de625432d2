#!/usr/bin/env bash
# 2026-12-07 sixteenth session, call 3 (issue 27): `gemv_layout = lanes` as it now routes (the code predictor's
# one-row projections only) against the defaults, on one machine:
#   run(command="bash docs/benchmarks/h200-step-profile/lanes-1207p/call2.sh", carry=[".whl", ".gpu_shared", ".tcache"])
# 1. checkpoint; the step at 1 / 8 rows (+ 64 prompt tokens): default, lanes
# 2. closed loop c = 1 / 8 through the gateway: default, lanes
# Expected (call 2's chains): a predictor layer at one row 18.55 -> 16.83 us, 75 a step: the 1-row step -0.13 ms
# (3.28 -> ~3.15 ms on an H100), c = 1 +3-4 %; 8 rows and prompt steps unchanged.
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
RES=/tmp/res; mkdir -p $RES
save() { tar -czf "$OUT/results.tar.gz" -C "$RES" .; }
SA="--engine-option row_buckets=1,8 --engine-option prefill_buckets=64"
STAGES=stepvariants STEPS_ARGS="$SA" STEPV_S=${STEPV_S:-50} STEP_VARIANTS="default: lanes:gemv_layout=lanes" \
  bash tests/qwen3tts/gpu_loop.sh 2>&1 | grep -E "^\| (1|8) \| (0|64) \||variant|steps " | tail -12
save; t steps
SKIP_CKPT=1 STAGES=variants VARIANT_C=1,8 VARIANT_RATES="" VARIANT_S=${VARIANT_S:-70} \
  VARIANTS="default: lanes:gemv_layout=lanes" bash tests/qwen3tts/gpu_loop.sh 2>&1 | grep -E "closed s|variant" | tail -8
save; t end

#!/usr/bin/env bash
# Eleventh session (2026-12-06), call B (issue 27), ~6 min: the predictor's 15 passes with part of its weights kept
# in L2 (chain/l2_persist.py, 1 and 8 rows); then on an H200 the defaults' step and closed loop c = 1 / 8 / 128
# (issue 27's card), elsewhere the teacher-forced tests not rerun since cp_attend_ref's fix (graphs-torch).
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export VOXGATE_COMMIT=${VOXGATE_COMMIT:-unknown}
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$GPU"
RES=/tmp/res; mkdir -p $RES
STAGES=none SKIP_CKPT=1 bash tests/qwen3tts/gpu_loop.sh > $RES/setup.log 2>&1; tail -1 $RES/setup.log; t setup
( export PYTHONPATH=/tmp/site-gw:/tmp/vx TRITON_CACHE_DIR=/tmp/tcache; cd docs/benchmarks/h200-step-profile/chain && \
  timeout 120 python3 l2_persist.py --rows 1,8 > $RES/l2-persist.md 2>&1 ); cat $RES/l2-persist.md | cut -c1-400
tar -czf "$OUT/results.tar.gz" -C "$RES" .; t l2
if [[ "$GPU" == *H200* ]]; then
  SA="--engine-option row_buckets=1,8,16 --engine-option prefill_buckets=64"
  STAGES=stepvariants STEPS_ARGS="$SA" STEPV_S=50 STEP_VARIANTS="default:" bash tests/qwen3tts/gpu_loop.sh 2>&1 | tail -4
  t steps
  SKIP_CKPT=1 STAGES=variants VARIANT_C=1,8,128 VARIANT_S=110 VARIANTS="default:" bash tests/qwen3tts/gpu_loop.sh 2>&1 | tail -6
else
  STAGES=tests TESTS=tests/qwen3tts/test_gpu_loop.py TESTS_K="teacher_forced and graphs-torch" TESTS_S=150 bash tests/qwen3tts/gpu_loop.sh 2>&1 | tail -6
fi
t end

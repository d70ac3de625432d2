#!/usr/bin/env bash
# Tenth session (2026-12-06), call A (issue 27), ~6 min: the GPU tests of fuse_attention (kernel, step model,
# teacher-forced fp32 and free-running bf16 at real shapes), the small_gemm engine test and split-K's; then the
# step (rows 1 / 8 / 16, profiled) with the defaults, with fuse_attention, and with the predictor's split-K.
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export VOXGATE_COMMIT=${VOXGATE_COMMIT:-unknown}
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
STAGES=tests TESTS="tests/kernel/test_cp_attend.py tests/qwen3tts/test_step_launches.py tests/qwen3tts/test_gpu_loop.py tests/qwen3tts/test_small_gemm.py tests/kernel/test_gemv.py" \
  TESTS_K="cp_attend or fused_attention or fused-attention or small_gemm_gemv_makes or (split and dtype0)" TESTS_S=230 \
  bash tests/qwen3tts/gpu_loop.sh 2>&1 | tail -14
t tests
SA="--engine-option row_buckets=1,8,16 --engine-option prefill_buckets=64 --profile"
SKIP_CKPT=1 STAGES=stepvariants STEPS_ARGS="$SA" STEPV_S=60 STEP_VARIANTS="default: fused:fuse_attention=true split16k:gemv_split=16384" bash tests/qwen3tts/gpu_loop.sh 2>&1 | tail -12
t end

#!/usr/bin/env bash
# Tenth session (2026-12-06), call B (issue 27), ~5 min: the step with the new defaults (fuse_attention, the predictor's
# split-K) against the ninth session's (both off); through the gateway, the same two at c = 1 / 8 / 128
# (+ open 1 req/s: idle first audio); cp_attend against the pair it replaces.
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export VOXGATE_COMMIT=${VOXGATE_COMMIT:-unknown}
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
SA="--engine-option row_buckets=1,8,16 --engine-option prefill_buckets=64"
STAGES=stepvariants STEPS_ARGS="$SA" STEPV_S=50 STEP_VARIANTS="default: before:fuse_attention=false&gemv_split=0" bash tests/qwen3tts/gpu_loop.sh 2>&1 | tail -6
t steps
SKIP_CKPT=1 STAGES=variants VARIANT_C=1,8,128 VARIANT_S=110 VARIANTS="default: before:fuse_attention=false&gemv_split=0" bash tests/qwen3tts/gpu_loop.sh 2>&1 | tail -8
t variants
PYTHONPATH=/tmp/site-gw:/tmp/vx TRITON_CACHE_DIR=/tmp/tcache timeout 60 python3 -m voxgate.kernels.bench cp_attend 2>&1 | tail -3
t bench
# then, on the same warm machine: SKIP_CKPT=1 STAGES=variants VARIANT_C=1,8 VARIANT_RATES="" VARIANT_S=100 VARIANTS="cw8:codec_width=8" bash tests/qwen3tts/gpu_loop.sh

#!/usr/bin/env bash
# Eleventh session (2026-12-06), call A (issue 27), ~8 min: the rows chains (predictor, Talker) at 8 and 1 rows with
# dot_loop.py's K-looped candidates (with and without the L2 prefetch before the PDL wait) and the engine's
# K-looped kernel (gemv_loop); its GPU tests; then the step at 1 / 8 / 16 rows: defaults, gemv_loop, and gemv_loop
# with the Talker's 2-16 rows through it.
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export VOXGATE_COMMIT=${VOXGATE_COMMIT:-unknown}
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$GPU"
RES=/tmp/res; mkdir -p $RES
STAGES=none SKIP_CKPT=1 bash tests/qwen3tts/gpu_loop.sh > $RES/setup.log 2>&1; tail -2 $RES/setup.log; t setup
ARMS="cuBLAS,engine,loop,dot 16 256 4,dot 16 256 4 pf,dot 16 256 4 pf late,dot 32 128 4 pf late,dot 16 128 6 pf late,dot 32 256 3 pf late,dot 64 128 4 pf late,dot 16 256 4 pf late t,dot 64 128 4 pf late t"
( export PYTHONPATH=/tmp/site-gw:/tmp/vx TRITON_CACHE_DIR=/tmp/tcache; cd docs/benchmarks/h200-step-profile/chain && \
  timeout 150 python3 rows_chain.py --rows 8,1 --arms "$ARMS" > $RES/chain-predictor.md 2>&1; t predictor; \
  timeout 150 python3 rows_chain.py --stack talker --rows 8,1 --arms "$ARMS" > $RES/chain-talker.md 2>&1 ); grep -v "^<\!--" $RES/chain-*.md | cut -c1-700
tar -czf "$OUT/results.tar.gz" -C "$RES" .; t chains
STAGES=tests TESTS="tests/kernel/test_gemv.py" TESTS_K="loop" TESTS_S=80 bash tests/qwen3tts/gpu_loop.sh 2>&1 | tail -5
t tests
SA="--engine-option row_buckets=1,8,16 --engine-option prefill_buckets=64"
STAGES=stepvariants STEPS_ARGS="$SA" STEPV_S=50 STEP_VARIANTS="default: loop:gemv_loop=true loop-talker:gemv_loop=true&gemv_talker_rows=16" bash tests/qwen3tts/gpu_loop.sh 2>&1 | tail -10
t end

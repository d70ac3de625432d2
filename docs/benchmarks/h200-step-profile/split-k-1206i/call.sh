#!/usr/bin/env bash
# 2026-12-06 ninth session, call A (issue 27), cut to the device time left: the rows chains at 8 rows with split-K
# arms (predictor and Talker), then GPU tests (split-K at real shapes in bf16 and in a captured chain, the one
# unverified small_gemm test), then the step profiled at 1 / 8 / 16 rows: defaults, then split-K with the Talker's
# rows through it. Everything is saved after each stage.
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export VOXGATE_COMMIT=${VOXGATE_COMMIT:-unknown}
RES=/tmp/res; mkdir -p $RES
STAGES=none SKIP_CKPT=1 bash tests/qwen3tts/gpu_loop.sh > $RES/setup.log 2>&1; tail -2 $RES/setup.log; t setup
export PYTHONPATH=/tmp/site-gw:/tmp/vx TRITON_CACHE_DIR=/tmp/tcache
( cd docs/benchmarks/h200-step-profile/chain && timeout 75 python3 rows_chain.py --rows 8 --arms "cuBLAS,engine,split 32768,split 16384,split 8192" > $RES/chain-predictor.md 2>&1; \
  timeout 75 python3 rows_chain.py --stack talker --rows 8 --arms "cuBLAS,rows kernel,split 32768,split 16384,split 8192" > $RES/chain-talker.md 2>&1 ); grep -v "^<\!--" $RES/chain-predictor.md; grep -v "^<\!--" $RES/chain-talker.md
tar -czf "$OUT/results.tar.gz" -C "$RES" .; t chains
STAGES=tests TESTS="tests/qwen3tts/test_small_gemm.py tests/kernel/test_gemv.py" TESTS_K="small_gemm_gemv_makes or (split and dtype1) or pdl-split" TESTS_S=${TESTS_S:-80} bash tests/qwen3tts/gpu_loop.sh 2>&1 | tail -6
t tests
SA="--engine-option row_buckets=1,8,16 --engine-option prefill_buckets=64"
SKIP_CKPT=1 STAGES=stepvariants STEPS_ARGS="$SA --profile" STEPV_S=60 STEP_VARIANTS="default: talker16k:gemv_split=16384&gemv_talker_rows=16" bash tests/qwen3tts/gpu_loop.sh 2>&1 | tail -12
t end

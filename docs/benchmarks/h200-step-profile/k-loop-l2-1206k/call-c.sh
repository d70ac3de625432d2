#!/usr/bin/env bash
# Eleventh session (2026-12-06), call C (issue 27), ~6 min: wider rows-kernel programs (each reads x's padded rows
# once for 32 or 64 columns, not 16): the rows chains at 8 rows (predictor, Talker) with the cols arms, then the step
# at 1 / 8 / 16 rows with gemv_columns = 32 / 64, split at 16,384 (the default) and with whole rows up to 65,536.
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export VOXGATE_COMMIT=${VOXGATE_COMMIT:-unknown}
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$GPU"
RES=/tmp/res; mkdir -p $RES
STAGES=none SKIP_CKPT=1 bash tests/qwen3tts/gpu_loop.sh > $RES/setup.log 2>&1; tail -1 $RES/setup.log; t setup
ARMS="cuBLAS,engine,split 16384 cols 32,split 16384 cols 64,split 65536 cols 32,split 65536 cols 64"
( export PYTHONPATH=/tmp/site-gw:/tmp/vx TRITON_CACHE_DIR=/tmp/tcache; cd docs/benchmarks/h200-step-profile/chain && \
  timeout 80 python3 rows_chain.py --rows 8 --arms "$ARMS" > $RES/chain-cols-predictor.md 2>&1; t predictor; \
  timeout 80 python3 rows_chain.py --stack talker --rows 8 --arms "$ARMS" > $RES/chain-cols-talker.md 2>&1 ); grep -v "^<\!--" $RES/chain-cols-*.md | cut -c1-500
tar -czf "$OUT/results.tar.gz" -C "$RES" .; t chains
SA="--engine-option row_buckets=1,8,16 --engine-option prefill_buckets=64"
STAGES=stepvariants STEPS_ARGS="$SA" STEPV_S=45 STEP_VARIANTS="default: cols32:gemv_columns=32 cols64:gemv_columns=64 cols32-whole:gemv_columns=32&gemv_split=65536 cols64-whole:gemv_columns=64&gemv_split=65536" bash tests/qwen3tts/gpu_loop.sh 2>&1 | grep -E "steps|^\|" | tail -24
t end

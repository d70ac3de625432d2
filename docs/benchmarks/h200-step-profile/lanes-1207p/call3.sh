#!/usr/bin/env bash
# Prepared in the sixteenth session (2026-12-07), not yet run: the lanes kernel at 2-16 rows in its second form
# (every row's sums gathered in their own layout and stored once: one barrier a launch, where the first form's
# store a row made 8-16), against the defaults (lanes at one row only), on one machine:
#   run(command="bash docs/benchmarks/h200-step-profile/lanes-1207p/call3.sh", carry=[".whl", ".gpu_shared", ".tcache"])
# 1. checkpoint; GPU tests: the lanes kernel at the real shapes, every row count (both dtypes, PDL bits), and
#    teacher-forced fp32 through the graphs with gemv_lanes_rows = 16
# 2. chains (rows_chain.py), predictor at 1 / 8 / 16 rows, Talker at 1 / 8: cuBLAS, engine, lanes (every row count),
#    lanes with at most 4 (and 2) columns a program: the Talker's one-row q|k|v and gate|up read slower through 8
#    (9.45 / 20.37 against the tiles kernel's 8.65 / 19.86 us, whose programs take 4 columns of K 2,048)
# 3. the step at 1 / 8 / 16 rows (+ 64 prompt tokens): default, lanes8 (gemv_lanes_rows = 8), lanes16
# 4. closed loop c = 1 / 8 through the gateway: default, then the lanes arm with the faster 8-row step
# Expected (from call 2's chains and the compiled code): the first form cost ~0.5 us a row past the first (q|k|v
# 5.67 -> 9.33 us at 8 rows); without a barrier a row, ~0.1-0.2 us: a predictor layer at 8 rows ~21 us against the
# rows kernel's 24.0 (split-K), -0.2 ms off the 8-row step (4.14 ms on an H100), if the registers the gathered sums
# take (o at 8 rows: 138 under Triton 3.6, 178 under 3.9) leave enough programs an SM.
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
RES=/tmp/res; mkdir -p $RES
save() { tar -czf "$OUT/results.tar.gz" -C "$RES" .; }
STAGES=tests TESTS="tests/kernel/test_gemv.py tests/qwen3tts/test_gpu_loop.py" \
  TESTS_K="(lanes and predictors_shapes) or gemv-lanes-pdl-fused-attention" TESTS_S=${TESTS_S:-150} \
  bash tests/qwen3tts/gpu_loop.sh 2>&1 | grep -v "^\[.*s\] triton" | tail -8
save; t tests
export PYTHONPATH=/tmp/site-gw:/tmp/vx TRITON_CACHE_DIR=/tmp/tcache
( cd docs/benchmarks/h200-step-profile/chain \
  && timeout 80 python3 rows_chain.py --rows 1,8,16 --arms "cuBLAS,engine,lanes,lanes cols 4,split 16384" > $RES/chain-predictor.md 2>&1; \
  timeout 60 python3 rows_chain.py --stack talker --rows 1,8 --arms "cuBLAS,engine,lanes,lanes cols 4,lanes cols 2" > $RES/chain-talker.md 2>&1 )
grep -v "^<\!--" $RES/chain-predictor.md | grep "layer\|failed\|wrong" ; grep -v "^<\!--" $RES/chain-talker.md | grep "layer\|failed\|wrong"
save; t chains
SA="--engine-option row_buckets=1,8,16 --engine-option prefill_buckets=64"
SKIP_CKPT=1 STAGES=stepvariants STEPS_ARGS="$SA --profile" STEPV_S=${STEPV_S:-60} \
  STEP_VARIANTS="default: lanes8:gemv_lanes_rows=8 lanes16:gemv_lanes_rows=16" \
  bash tests/qwen3tts/gpu_loop.sh 2>&1 | grep -v "^\[.*s\] triton" | tail -16
save; t steps
ms8() { grep -E "^\| 8 \| 0 \|" $RES/steps-$1/steps.md 2>/dev/null | head -1 | awk -F'|' '{print $4+0}'; }
D=$(ms8 default); L8=$(ms8 lanes8); L16=$(ms8 lanes16); echo "8-row step: default $D, lanes8 $L8, lanes16 $L16 ms"
BEST="lanes8:gemv_lanes_rows=8"
python3 -c "import sys; sys.exit(0 if float('${L16:-99}') < float('${L8:-99}') else 1)" && BEST="lanes16:gemv_lanes_rows=16"
SKIP_CKPT=1 STAGES=variants VARIANT_C=1,8 VARIANT_RATES="" VARIANT_S=${VARIANT_S:-70} VARIANTS="default: $BEST" \
  bash tests/qwen3tts/gpu_loop.sh 2>&1 | grep -E "closed s|variant" | tail -8
save; t end

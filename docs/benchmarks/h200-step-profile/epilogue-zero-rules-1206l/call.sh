#!/usr/bin/env bash
# Twelfth session (2026-12-06), issue 27, ~7 min: branch exp/combined = main's frame epilogue and text table
# (d9845ab) + codebook 0's rules in its draw and the draw under PDL (exp/draw-rules-pdl). Their GPU tests (the draw
# and epilogue kernels, teacher-forced fp32 through the defaults' graphs, free-running bf16), then the step at
# 1 / 8 / 16 rows: this tree, 7cac185 (before all three), this tree without the epilogue and table, this tree again.
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export VOXGATE_COMMIT=${VOXGATE_COMMIT:-unknown}
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$GPU"
RES=/tmp/res; mkdir -p $RES
STAGES=tests TESTS="tests/kernel/test_sample_draw.py tests/kernel/test_frame_epilogue.py tests/qwen3tts/test_gpu_loop.py" \
  TESTS_K="draw or epilogue or graphs-triton-gemv-pdl-fused-attention or (free_running and default)" \
  TESTS_S=200 bash tests/qwen3tts/gpu_loop.sh 2>&1 | grep -E "passed|failed|FAILED|ERROR" | tail -10
cp /tmp/res/pytest-all.log $RES/ 2>/dev/null
t tests
mkdir -p /tmp/old /tmp/vxold/voxgate && tar -xzf .baseline/7cac185.tar.gz -C /tmp/old
for d in engine gateway kernels web configs; do ln -sfn /tmp/old/$d /tmp/vxold/voxgate/$d; done
ln -sfn /tmp/old/gateway/sdk /tmp/vxold/voxgate/client; ln -sfn /tmp/old/gateway/integrations /tmp/vxold/voxgate/integrations
SA="--engine-option row_buckets=1,8,16 --engine-option prefill_buckets=64"
step() {  # name, PYTHONPATH tail, extra options
  PYTHONPATH=/tmp/site-gw:$2 TRITON_CACHE_DIR=/tmp/tcache timeout 100 python3 -m voxgate.gateway.cli bench steps \
    --checkpoint /tmp/ck17 --out "$RES/steps-$1" --depth-variants none $SA $3 2>&1 | grep -E "^\| (1|8|16) \| 0 \||rror" | head -4
  t "steps $1"
}
step new /tmp/vx; step old /tmp/vxold
step noepi /tmp/vx "--engine-option epilogue=torch --engine-option text_table=mlp"; step new2 /tmp/vx
tar -czf "$OUT/results.tar.gz" -C "$RES" .
t end

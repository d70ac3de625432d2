#!/usr/bin/env bash
# Twelfth session (2026-12-06), issue 27, ~3.5 min (the device time left): step_priority = high against the
# defaults, closed loop c = 1 / 8 and open 1 req/s, each arm a server of its own (its GPU test not in this call).
# Run on tree 39829ca (the option `step_priority`, removed again after this call).
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export VOXGATE_COMMIT=${VOXGATE_COMMIT:-unknown}
nvidia-smi --query-gpu=name --format=csv,noheader
STAGES=variants VARIANT_C=1,8 VARIANT_S=120 VARIANT_DUR=10 VARIANTS="default: stepshigh:step_priority=high" \
  bash tests/qwen3tts/gpu_loop.sh 2>&1 | grep -E "closed sentences|open sentences|^\[" | tail -12
t end

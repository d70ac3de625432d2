#!/usr/bin/env bash
# Twelfth session (2026-12-06), right after call.sh on the same warm H100, tree a8f5288 (exp/combined, then main):
# closed loop sentences c = 1 / 8 / 128 and open 1 req/s through the gateway on the defaults, one server.
S=0; [ -f /tmp/ck17/config.json ] && S=1
VOXGATE_COMMIT=a8f5288 SKIP_CKPT=$S STAGES=variants VARIANT_C=1,8,128 VARIANT_S=200 VARIANT_DUR=15 VARIANTS="default:" \
  bash tests/qwen3tts/gpu_loop.sh 2>&1 | tail -12

#!/usr/bin/env bash
# 2026-12-07 twentieth session, with ~500 s of device time left, from the repo root:
#   run(command="bash docs/benchmarks/card-1207/call6.sh", carry=[".whl", ".gpu_shared", ".tcache"], timeout_s=330)
# On an H200: issue 27's closed loop on the defaults, c = 1 / 8 / 128 / 256, and idle first audio (open, 1 req/s),
# one in-process server (no SLO capacity, no cold start, no tests: call3.sh's ~550 s).
# Elsewhere: codec_sms = 32 with codec_sms_rows = 8 against the defaults at c = 8 and idle (1 req/s), a server each:
# the codec-sms-1207r arms gave c = 8 +1.9 % with it, c = 128 the same, first audio at c = 8 +3 ms p50.
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "device: $GPU"
case $GPU in
  *H200*) STAGES=variants VARIANT_C=1,8,128,256 VARIANT_RATES=1 VARIANT_S=${VARIANT_S:-260} VARIANTS="card:" \
            bash tests/qwen3tts/gpu_loop.sh 2>&1 | grep -E "closed s|open s|variant|H200" | tail -8 ;;
  *) STAGES=variants VARIANT_C=8 VARIANT_RATES=1 VARIANT_S=${VARIANT_S:-110} \
       VARIANTS="default: codec32r8:codec_sms=32&codec_sms_rows=8" \
       bash tests/qwen3tts/gpu_loop.sh 2>&1 | grep -E "closed s|open s|variant" | tail -8 ;;
esac

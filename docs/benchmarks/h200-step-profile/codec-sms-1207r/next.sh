#!/usr/bin/env bash
# Prepared in the eighteenth session (2026-12-07), not yet run (no device time left): codec_sms on one machine at
# c = 1 / 8 / 128, all calls on 32 SMs and only calls of up to 8 rows there (codec_sms_rows), from the repo root:
#   run(command="bash docs/benchmarks/h200-step-profile/codec-sms-1207r/next.sh", carry=[".whl", ".gpu_shared", ".tcache"])
# 1. the GPU tests: a limited stream's results, the codec's codes and audio with all / narrow calls limited
# 2. closed loop c = 1 / 8 / 128 on sentences (`voxgate bench`, a server each): the defaults, codec_sms = 32,
#    codec_sms = 32 with codec_sms_rows = 8
# Expected (call 2 on an H100: c = 8 +2.7 % with every call on 32 SMs; its 64 x 4 call 15.5 ms there against 5.3):
# c = 8 +2-4 % either way; c = 128 below the defaults with every call limited, about equal with codec_sms_rows = 8;
# c = 1 within noise, first audio +1-2 ms.
OUT=${OUT:-/tmp/out}; T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
STAGES=tests TESTS="tests/test_sm_stream.py tests/qwen3tts/test_gpu_loop.py" TESTS_K="sm_limited or some_sms" \
  TESTS_S=${TESTS_S:-150} bash tests/qwen3tts/gpu_loop.sh 2>&1 | grep -E "PASS|FAIL|ERROR|passed|failed" | tail -5
t tests
SKIP_CKPT=1 STAGES=variants VARIANT_C=${VARIANT_C:-1,8,128} VARIANT_RATES="" VARIANT_S=${VARIANT_S:-110} \
  VARIANTS=${VARIANTS:-"default: codec32:codec_sms=32 codec32r8:codec_sms=32&codec_sms_rows=8"} \
  bash tests/qwen3tts/gpu_loop.sh 2>&1 | grep -v "triton cache\|^torch" | tail -14
t end

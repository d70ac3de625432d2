#!/usr/bin/env bash
# 2026-12-07 eighteenth session: one device call that does what its card allows, from the repo root:
#   run(command="bash docs/benchmarks/card-1207/call3.sh", carry=[".whl", ".gpu_shared", ".tcache"])
# on an H200: issue 27's card on the defaults (call1b.sh, with the default's teacher-forced fp32 test first), never
# run on an H200 yet; elsewhere: issue 27's codec_sms (every call, and calls of up to 8 rows) against the defaults
# at c = 1 / 8 / 128 after its GPU tests (h200-step-profile/codec-sms-1207r/next.sh). Its first run (eighteenth
# session, at b4f3627) took codec-sms-1207r/call.sh there instead.
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "device: $GPU"
case $GPU in
  *H200*) CARD_TESTS=tests/qwen3tts/test_gpu_loop.py CARD_TESTS_K=graphs-triton-gemv-pdl-fused-attention \
            TESTS_S=${TESTS_S:-120} exec bash docs/benchmarks/card-1207/call1b.sh ;;
  *) exec bash docs/benchmarks/h200-step-profile/codec-sms-1207r/next.sh ;;
esac

#!/usr/bin/env bash
# 2026-12-07 nineteenth session (ran once, on an H100: the turns arm, whose option was removed after it): one device
# call that does what its card allows, from the repo root:
#   run(command="bash docs/benchmarks/card-1207/call4.sh", carry=[".whl", ".gpu_shared", ".tcache"])
# on an H200: issue 27's card on the defaults (call1b.sh, with the default's teacher-forced fp32 test first), never
# run on an H200 yet; elsewhere: issue 28's aligner_turns in the loop (h200-word-times/turns-1207s/call.sh).
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "device: $GPU"
case $GPU in
  *H200*) CARD_TESTS=tests/qwen3tts/test_gpu_loop.py CARD_TESTS_K=graphs-triton-gemv-pdl-fused-attention \
            TESTS_S=${TESTS_S:-120} exec bash docs/benchmarks/card-1207/call1b.sh ;;
  *) exec bash docs/benchmarks/h200-word-times/turns-1207s/call.sh ;;
esac

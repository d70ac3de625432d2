#!/usr/bin/env bash
# 2026-12-07 twentieth session, with ~500 s of device time left, from the repo root:
#   run(command="bash docs/benchmarks/card-1207/call6.sh", carry=[".whl", ".gpu_shared", ".tcache"], timeout_s=330)
# On an H200: issue 27's closed loop on the defaults, c = 1 / 8 / 128 / 256, and idle first audio (open, 1 req/s),
# one in-process server (no SLO capacity, no cold start, no tests: call3.sh's ~550 s).
# Elsewhere: the SM-limited stream's `gpu` tests (tests/test_sm_stream.py; the twentieth session's fix for the abort
# at exit, engine/sm_stream.py, has not run on a GPU). Its first run elsewhere (twentieth session, 6dbc0b8) ran the
# aligner's `gpu` tests instead (card-1207/README.md).
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "device: $GPU"
case $GPU in
  *H200*) STAGES=variants VARIANT_C=1,8,128,256 VARIANT_RATES=1 VARIANT_S=${VARIANT_S:-260} VARIANTS="card:" \
            bash tests/qwen3tts/gpu_loop.sh 2>&1 | grep -E "closed s|open s|variant|H200" | tail -8 ;;
  *) SKIP_CKPT=1 STAGES=tests TESTS=tests/test_sm_stream.py TESTS_S=120 bash tests/qwen3tts/gpu_loop.sh 2>&1 | tail -8 ;;
esac

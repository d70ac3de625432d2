#!/usr/bin/env bash
# 2026-12-07 twenty-first session, the first call, from the repo root:
#   run(command="bash docs/benchmarks/card-1207/call7.sh", carry=[".whl", ".gpu_shared", ".tcache", ".baseline"])
# On an H200: issue 27's card on the defaults (call3.sh's H200 branch: call1b.sh with the teacher-forced fp32 test
# first), never run on an H200 yet. Elsewhere (an H100 has run codec_sms already): the aligner's host-operation cut
# against 56e5cd3 (h200-word-times/dispatch-1207s/call.sh, stages stop starting at 360 s), then the SM-limited
# stream's `gpu` tests (tests/test_sm_stream.py, never run on a GPU) in what is left.
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "device: $GPU"
case $GPU in
  *H200*) exec bash docs/benchmarks/card-1207/call3.sh ;;
esac
ELAPSED_CAP=${ELAPSED_CAP:-360} bash docs/benchmarks/h200-word-times/dispatch-1207s/call.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
SKIP_CKPT=1 STAGES=tests TESTS=tests/test_sm_stream.py TESTS_S=90 timeout 110 bash tests/qwen3tts/gpu_loop.sh 2>&1 \
  | tail -12 | tee "$OUT/sm_stream_tests.txt"

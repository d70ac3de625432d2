#!/usr/bin/env bash
# 2026-12-07 twenty-first session, the first call, from the repo root:
#   run(command="bash docs/benchmarks/card-1207/call7.sh", carry=[".whl", ".gpu_shared", ".tcache"])
# On an H200: issue 27's card on the defaults (call3.sh's H200 branch: call1b.sh with the teacher-forced fp32 test
# first), never run on an H200 yet. Elsewhere (an H100 has run codec_sms already): word times not held, a sentence
# aligned whole against in pieces (h200-word-times/whole-1207u/call.sh, stages stop starting at 380 s), then the
# SM-limited stream's `gpu` tests (tests/test_sm_stream.py, never run on a GPU) in what is left.
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "device: $GPU"
case $GPU in
  *H200*) exec bash docs/benchmarks/card-1207/call3.sh ;;
esac
ELAPSED_CAP=${ELAPSED_CAP:-380} bash docs/benchmarks/h200-word-times/whole-1207u/call.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
SKIP_CKPT=1 STAGES=tests TESTS=tests/test_sm_stream.py TESTS_S=90 timeout 110 bash tests/qwen3tts/gpu_loop.sh 2>&1 \
  | tail -12 | tee "$OUT/sm_stream_tests.txt"

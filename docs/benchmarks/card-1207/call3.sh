#!/usr/bin/env bash
# 2026-12-07 eighteenth session: one device call that does what its card allows, from the repo root:
#   run(command="bash docs/benchmarks/card-1207/call3.sh", carry=[".whl", ".gpu_shared", ".tcache"])
# on an H200: issue 27's card on the defaults (call1b.sh, with the default's teacher-forced fp32 test first), never
# run on an H200 yet; elsewhere: issue 28's aligner_spectrum = matmul against the defaults
# (h200-word-times/parts-1207q/call5.sh), after the green-context probe (h200-word-times/green-1207r/probe.py).
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "device: $GPU"
case $GPU in
  *H200*) CARD_TESTS=tests/qwen3tts/test_gpu_loop.py CARD_TESTS_K=graphs-triton-gemv-pdl-fused-attention \
            TESTS_S=${TESTS_S:-120} exec bash docs/benchmarks/card-1207/call1b.sh ;;
  *) PYTHONPATH=/tmp/site-gw:/tmp/vx bash -c 'SKIP_CKPT=1 STAGES=none bash tests/qwen3tts/gpu_loop.sh > /dev/null 2>&1
       timeout 90 python3 docs/benchmarks/h200-word-times/green-1207r/probe.py 2>&1 | grep -v -i warn | tee $OUT/probe.txt'
     ELAPSED_CAP=${ELAPSED_CAP:-330} exec bash docs/benchmarks/h200-word-times/parts-1207q/call5.sh ;;
esac

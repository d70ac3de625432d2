#!/usr/bin/env bash
# 2026-12-07 seventeenth session, fourth call (short: the device time left): the aligner's features with
# aligner_spectrum fft against matmul on CUDA (spectrum.py), after call3's profile put cuFFT's plans first.
#   run(command="bash docs/benchmarks/h200-word-times/parts-1207q/call4.sh", carry=[".whl", ".gpu_shared", ".tcache"])
SKIP_CKPT=1 STAGES=none bash tests/qwen3tts/gpu_loop.sh > /dev/null 2>&1
PYTHONPATH=/tmp/site-gw:/tmp/vx timeout 60 python3 docs/benchmarks/h200-word-times/parts-1207q/spectrum.py 2>&1 \
  | grep -v -i warn | tee "$OUT/spectrum.txt"

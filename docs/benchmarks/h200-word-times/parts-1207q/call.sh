#!/usr/bin/env bash
# 2026-12-07 seventeenth session: one device call, from the repo root, carrying .whl, .gpu_shared and .tcache:
#   run(command="bash docs/benchmarks/h200-word-times/parts-1207q/call.sh", carry=[".whl", ".gpu_shared", ".tcache"])
# 1. issue 27: the default's teacher-forced fp32 test through the graphs (graphs-triton-gemv-pdl-fused-attention),
#    not run since gemv_layout = lanes became the default
# 2. on an H200: issue 27's card on the defaults (card-1207/call1.sh: closed loop c = 1 / 8 / 128 / 256, idle first
#    audio, cold start, SLO sentences 320 / passages 48 req/s in 60 s windows), never run on an H200 yet;
#    elsewhere, issue 28: where an aligner call's time goes in the loop (voxgate_engine_aligner_part_seconds: host
#    until its work is queued, GIL waits included; gpu_wait; post), with word times not held at sentence rates near
#    capacity, beside the same server without word times, then idle, c = 1 and c = 128 (the engine's defaults;
#    rates for an H100, ~30 req/s under the H200's)
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "device: $GPU"
TF="graphs-triton-gemv-pdl-fused-attention"
case $GPU in
  *H200*)
    CARD_TESTS=tests/qwen3tts/test_gpu_loop.py CARD_TESTS_K=$TF TESTS_S=${TESTS_S:-120} CARD_S=${CARD_S:-170} \
      PASS_DRAIN=${PASS_DRAIN:-35} bash docs/benchmarks/card-1207/call1.sh ;;
  *)
    STAGES=tests TESTS=tests/qwen3tts/test_gpu_loop.py TESTS_K=$TF TESTS_S=${TESTS_S:-150} \
      bash tests/qwen3tts/gpu_loop.sh 2>&1 | grep -E "PASS|FAIL|ERROR|passed|failed" | tail -5
    STAGES=slo,report BENCH3S=0 RATES=${RATES:-240,270,300} BASE_RATES=${BASE_RATES:-330,360} \
      REPORT="nohold-idle nohold-c1 nohold-c128" ELAPSED_CAP=${ELAPSED_CAP:-330} bash tests/aligner/gpu_aligner.sh ;;
esac

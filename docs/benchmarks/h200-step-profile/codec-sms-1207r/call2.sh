#!/usr/bin/env bash
# 2026-12-07 eighteenth session, after call.sh: codec_sms again now that the codec's graphs are captured in the
# limited stream's green context (call.sh's replays ran on every SM: probe2.py), closed c = 8 and 128, one machine:
#   run(command="bash docs/benchmarks/h200-step-profile/codec-sms-1207r/call2.sh", carry=[".whl", ".gpu_shared", ".tcache"])
# Expected (probe2: a chain of small kernels ran 5.5x its time alone beside a flood of GEMMs on every SM, 1.15x
# beside one on 32 SMs): c = 8 up to ~0.38 ms a 4.6-ms period back (~132 -> ~143 audio-s/s on an H100) if the
# codec's calls keep up on 32 SMs; c = 128 may lose (its codec calls fill the GPU).
OUT=${OUT:-/tmp/out}; T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
STAGES=tests TESTS="tests/qwen3tts/test_gpu_loop.py" TESTS_K="some_sms" TESTS_S=${TESTS_S:-90} \
  bash tests/qwen3tts/gpu_loop.sh 2>&1 | grep -E "PASS|FAIL|ERROR|passed|failed" | tail -4
t tests
SKIP_CKPT=1 STAGES=variants VARIANT_C=${VARIANT_C:-8,128} VARIANT_RATES="" VARIANT_S=${VARIANT_S:-110} \
  VARIANTS=${VARIANTS:-"default: codec32:codec_sms=32"} bash tests/qwen3tts/gpu_loop.sh 2>&1 \
  | grep -v "triton cache\|^torch" | tail -12
t end

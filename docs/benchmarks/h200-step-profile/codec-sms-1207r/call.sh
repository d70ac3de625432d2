#!/usr/bin/env bash
# 2026-12-07 eighteenth session (ran at b4f3627, graphs then captured on a plain stream; the aligner test it names was
# removed with aligner_sms): the codec on some of the GPU's SMs (engine option codec_sms, a CUDA green context)
# against the defaults, through the gateway, on one machine, from the repo root:
#   run(command="bash docs/benchmarks/h200-step-profile/codec-sms-1207r/call.sh", carry=[".whl", ".gpu_shared", ".tcache"])
# 1. the green contexts' GPU tests: a limited stream's results (eager, a graph replayed there), the codec's audio
#    and the aligner's words on a limited stream against a plain one
# 2. the probe (h200-word-times/green-1207r/probe.py): does a limited stream hold a GEMM to its SMs, eager and as a
#    graph, and does a chain of small dependent kernels keep its pace beside a flood on a limited stream?
# 3. closed loop c = 1 / 8 / 128 on sentences (`voxgate bench`, a server each): the defaults, codec_sms = 24, 40
# Expected (card-1207's timeline at c = 8 on an H100: the period 4.61 ms = the 8-row step 4.15 + 0.38 of the codec
# beside it + ~0.07 of prompt steps): if the steps no longer wait behind the codec's blocks, up to 0.38 ms a period
# back, c = 8 ~132 -> ~143 audio-s/s on an H100; c = 128 may lose (its codec calls fill the GPU and take longer on
# fewer SMs).
OUT=${OUT:-/tmp/out}; T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
STAGES=tests TESTS="tests/test_sm_stream.py tests/qwen3tts/test_gpu_loop.py tests/aligner/test_worker.py" \
  TESTS_K="sm_limited or some_sms" TESTS_S=${TESTS_S:-120} bash tests/qwen3tts/gpu_loop.sh 2>&1 | tail -8
t tests
PYTHONPATH=/tmp/site-gw:/tmp/vx timeout 90 python3 docs/benchmarks/h200-word-times/green-1207r/probe.py 2>&1 \
  | grep -v -i warn | tee "$OUT/probe.txt"
t probe
SKIP_CKPT=1 STAGES=variants VARIANT_C=${VARIANT_C:-1,8,128} VARIANT_RATES="" VARIANT_S=${VARIANT_S:-100} \
  VARIANTS=${VARIANTS:-"default: codec24:codec_sms=24 codec40:codec_sms=40"} bash tests/qwen3tts/gpu_loop.sh 2>&1 \
  | grep -v "triton cache\|^torch" | tail -16
t end

#!/usr/bin/env bash
# 2026-12-07 (nineteenth session), ran at 3ba0bfc (aligner_turns was removed after it): engine option aligner_turns (the aligner's graph replays queued by the loop's
# thread between two steps, engine/gpu_turns.py) in the loop, word times not held, one device call:
#   run(command="bash docs/benchmarks/h200-word-times/turns-1207s/call.sh", carry=[".whl", ".gpu_shared", ".tcache"])
# 1. the turns' `gpu` tests (CUDA order around a turn; the aligner's graphs in turns against without)
# 2. a server with aligner_turns=true: sentence SLO capacity not held (RATES), without word times (BASE_RATES) on
#    the same server; then idle first audio not held, closed c = 128 not held and without word times
# 3. a server with the defaults: closed c = 128 not held (the open-loop figure on the defaults is on record:
#    270 req/s against 360 on an H100, four sessions)
# Expected: the capacity cost of word times from ~25 % toward the aligner's own GPU share (~10-13 %), since the
# steps' small kernels no longer wait for SMs behind its GEMMs; first audio can wait one aligner graph (a few ms).
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "device: $GPU"
case $GPU in *H200*) R0=330,360,390 B0=390,420 ;; *) R0=300,330,360 B0=360,390 ;; esac
SKIP_CKPT=1 STAGES=none bash tests/qwen3tts/gpu_loop.sh > /dev/null 2>&1
PYTHONPATH=/tmp/site-gw:/tmp/vx TRITON_CACHE_DIR=/tmp/tcache timeout 90 python3 -m pytest tests/test_gpu_turns.py \
  tests/aligner/test_turns.py -k cuda -c /dev/null --confcutdir=tests -p no:cacheprovider -q -rs \
  -W ignore::pytest.PytestUnknownMarkWarning 2>&1 | tail -4
STAGES=slo,report BENCH3S=0 RATES=${RATES:-$R0} BASE_RATES=${BASE_RATES:-$B0} \
  REPORT="nohold-idle nohold-c128 none-c128" NEW_SERVE="--engine-option aligner_turns=true" \
  DEFAULTS_ARM=1 DEFAULTS_RATES=none ELAPSED_CAP=${ELAPSED_CAP:-420} bash tests/aligner/gpu_aligner.sh

#!/usr/bin/env bash
# 2026-12-07 eighteenth session: the aligner on some of the GPU's SMs (engine option aligner_sms, a CUDA green
# context) against the defaults, word times not held, on one machine, from the repo root:
#   run(command="bash docs/benchmarks/h200-word-times/green-1207r/call.sh", carry=[".whl", ".gpu_shared", ".tcache"])
# 1. probe.py: does a limited stream hold its GEMMs (eager and graphs) to its SMs, and does a chain of small
#    dependent kernels run faster beside a flood on a limited stream than beside one on a plain stream?
# 2. a server with aligner_sms = SMS (32): sentence SLO capacity not held (RATES), without word times (BASE_RATES),
#    closed c = 128 not held
# 3. a server with the defaults: not held at the same rates, then closed c = 128
# Rates for an H100 (on an H200 ~30 req/s more). Expected: if the probe's chain runs near its time alone beside a
# limited flood, the loop's steps keep their pace beside the aligner, and capacity not held moves toward the
# capacity without word times (360 on an H100) by up to the part of the 25 % that is interference.
PYTHONPATH=/tmp/site-gw:/tmp/vx bash -c 'SKIP_CKPT=1 STAGES=none bash tests/qwen3tts/gpu_loop.sh > /dev/null 2>&1;
  timeout 90 python3 docs/benchmarks/h200-word-times/green-1207r/probe.py 2>&1 | grep -v -i warn | tee $OUT/probe.txt'
STAGES=slo,report BENCH3S=0 RATES=${RATES:-270,300,330} BASE_RATES=${BASE_RATES:-360} REPORT="nohold-c128" \
  NEW_SERVE="--engine-option aligner_sms=${SMS:-32}" \
  DEFAULTS_ARM=1 DEFAULTS_RATES=${RATES:-270,300,330} ELAPSED_CAP=${ELAPSED_CAP:-360} bash tests/aligner/gpu_aligner.sh

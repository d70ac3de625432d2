#!/usr/bin/env bash
# Prepared in the twenty-first session (2026-12-07): how much of word times' cost is the re-read. Not held, a
# sentence aligned whole (one call when it is made: engine option aligner_group_ms = 0) against in pieces (the
# default, 1.2-1.5 s aligned per second of speech: each piece's last words are aligned again with the next), on one
# card in one call, beside the same server without word times:
#   run(command="bash docs/benchmarks/h200-word-times/whole-1207u/call.sh", carry=[".whl", ".gpu_shared", ".tcache"])
# 1. a server with aligner_group_ms = 0: SLO capacity not held (RATES), without word times (BASE_RATES), closed
#    c = 128 not held
# 2. a server on the defaults (pieces): SLO capacity not held (DEFAULTS_RATES), closed c = 128 not held
# Expected: whole aligns 1.0 s per second of speech against 1.2-1.5, so the aligner's GPU time per second of speech
# falls by a sixth to a third and capacity rises by about a rate step (30 req/s); more words reach the client after
# the listener heard them (a sentence's first second is heard before its one call answers).
# Ran twice on one H100 (twenty-first session; README.md of h200-word-times says what came): call1/ as above, call2/
#   RATES=150,240,270,300 BASE_RATES=300,330 DEFAULTS_RATES=150,240,270 ELAPSED_CAP=430 \
#     REPORT="none-c128 nohold-c128" bash docs/benchmarks/h200-word-times/whole-1207u/call.sh
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "device: $GPU"
case $GPU in *H200*) R0=300,330,360 B0=390 D0=270,300 ;; *) R0=270,300,330 B0=360 D0=270,300 ;; esac
STAGES=slo,report BENCH3S=0 NEW_SERVE="--engine-option aligner_group_ms=0" RATES=${RATES:-$R0} \
  BASE_RATES=${BASE_RATES:-$B0} REPORT=${REPORT:-nohold-c128} DEFAULTS_ARM=1 DEFAULTS_RATES=${DEFAULTS_RATES:-$D0} \
  ELAPSED_CAP=${ELAPSED_CAP:-420} bash tests/aligner/gpu_aligner.sh

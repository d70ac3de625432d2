#!/usr/bin/env bash
# Prepared in the twenty-first session (2026-12-07): not-held clips gathered into fuller aligner calls (engine
# option aligner_gather_ms = 120) against the defaults (0: a call starts as soon as the aligner is free), one tree,
# one card, one call:
#   run(command="bash docs/benchmarks/h200-word-times/gather-1207u/call.sh", carry=[".whl", ".gpu_shared", ".tcache"])
# 1. a server with aligner_gather_ms = 120: SLO capacity not held (RATES), without word times (BASE_RATES), closed
#    c = 128 not held
# 2. a server on the defaults: SLO capacity not held (DEFAULTS_RATES), closed c = 128 not held
# Why: in whole-1207u a call beside the busy loop took 44-68 ms for 11-27 clips, so its cost is mostly per call.
# Expected: calls about 1.5x fuller (~40 clips against 27) and a third fewer near capacity, the aligner's busy time
# per second of speech down by about a quarter, fewer refusals for slots, capacity up about a rate step; words
# later (lead p50 down by up to 120 ms from ~500, more of them late).
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "device: $GPU"
case $GPU in *H200*) R0=270,300,330 B0=390 ;; *) R0=240,270,300 B0=330 ;; esac
STAGES=slo,report BENCH3S=0 NEW_SERVE="--engine-option aligner_gather_ms=${GATHER_MS:-120}" RATES=${RATES:-$R0} \
  BASE_RATES=${BASE_RATES:-$B0} REPORT=${REPORT:-nohold-c128} DEFAULTS_ARM=1 DEFAULTS_RATES=${DEFAULTS_RATES:-$R0} \
  ELAPSED_CAP=${ELAPSED_CAP:-430} bash tests/aligner/gpu_aligner.sh

#!/usr/bin/env bash
# Prepared in the twentieth session (2026-12-07): CPython's switch interval (engine option gil_switch_ms) at 0.1 ms
# against the default 0.5, word times not held, on one tree and one card:
#   run(command="bash docs/benchmarks/h200-word-times/gil-1207t/call.sh", carry=[".whl", ".gpu_shared", ".tcache"])
# 1. a server with gil_switch_ms=0.1: sentence SLO capacity not held (RATES), without word times (BASE_RATES),
#    closed c = 128 not held and without
# 2. a server with the defaults (0.5): not held at the same rates, closed c = 128 not held
# Why: near capacity with word times a 128-row step's host part grows from ~2 to ~4.8 ms (parts-1207q). Every torch
# call lets go of the GIL; beside a thread running Python, taking it back waits for the switch interval. On the CPU
# (2 cores, python /tmp/gil/convoy.py as gil-1207t/README.md shows): 20 small torch ops take 0.018 ms alone,
# beside one busy Python thread 1.17 ms at 0.5 ms, 0.37 at 0.1, 0.27 at 0.05; 3 busy threads lose 7 % of their
# Python throughput at 0.1. Expected: the step's host part near capacity back toward ~2 ms, so steps shorter,
# slots freed sooner and fewer refusals: not-held capacity up one rate step (270 -> 300 on an H100).
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "device: $GPU"
case $GPU in *H200*) R0=270,300,330 B0=390,420 ;; *) R0=270,300,330 B0=360,390 ;; esac
STAGES=slo,report BENCH3S=0 RATES=${RATES:-$R0} BASE_RATES=${BASE_RATES:-$B0} REPORT="nohold-c128 none-c128" \
  NEW_SERVE="--engine-option gil_switch_ms=0.1" DEFAULTS_ARM=1 DEFAULTS_RATES=${RATES:-$R0} \
  ELAPSED_CAP=${ELAPSED_CAP:-430} bash tests/aligner/gpu_aligner.sh

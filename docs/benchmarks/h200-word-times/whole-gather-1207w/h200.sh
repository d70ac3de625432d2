#!/usr/bin/env bash
# Prepared in the twenty-fourth session (2026-12-07), after call1-repeat made whole-and-gathered the engine's
# defaults for streams not held: the same comparison on an H200 (issue 28's card), the defaults against the earlier
# ones (a not-held sentence in pieces of 1 s, no gathering), from the repo root:
#   run(command="bash docs/benchmarks/h200-word-times/whole-gather-1207w/h200.sh", carry=[".whl", ".gpu_shared", ".tcache"], timeout_s=590)
# In gpu_aligner.sh's names the earlier defaults are the "new" arm (nohold-cap, with the baseline without word times
# on its server: none-cap) and today's are the "defaults" arm (nohold-cap-defaults). Expected, from the H100's
# -17 % against -25 %: 330 req/s against 270-300 on the H200, where 390 held without word times. The earlier
# defaults search only up to their known knee (270-300) and REPORT=none skips closed c = 128, so the defaults arm,
# second, has the time for its three rates.
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "device: $GPU"
case $GPU in *H200*) R0=270,300 D0=300,330,360 B0=390 ;; *) R0=240,270 D0=270,300,330 B0=360 ;; esac
STAGES=slo,report BENCH3S=0 \
  NEW_SERVE="--engine-option aligner_not_held_group_ms=1000 --engine-option aligner_gather_ms=0" \
  RATES=${RATES:-$R0} BASE_RATES=${BASE_RATES:-$B0} REPORT=${REPORT:-none} DEFAULTS_ARM=1 \
  DEFAULTS_RATES=${DEFAULTS_RATES:-$D0} ELAPSED_CAP=${ELAPSED_CAP:-440} bash tests/aligner/gpu_aligner.sh

#!/usr/bin/env bash
# (Ran in the twenty-fourth session at d50cdcf: README "A sentence aligned whole with fuller calls". From the commit
# after it these are the engine's defaults for streams not held; on an H200 the comparison is h200.sh.)
# Prepared in the twenty-third session (2026-12-07, no device lent): a sentence aligned whole (aligner_group_ms = 0)
# and its not-held clips gathered into fuller calls (aligner_gather_ms = 120) against the defaults, one tree, one
# card, one call, each capacity search starting below the knee:
#   run(command="bash docs/benchmarks/h200-word-times/whole-gather-1207w/call.sh", carry=[".whl", ".gpu_shared", ".tcache"])
# Why: whole-1207u aligned each second once (1.00 s a second of speech against 1.34-1.45 in pieces; closed c = 128
# +16-23 %) but its open-loop calls held half the clips (13 against 27) at the same time a call, and capacity fell;
# gather-1207u made calls a third fuller (the aligner's time per second of speech -13 %). Together: fewer seconds
# and fuller calls. Expected: the aligner's busy ms per second of speech down a quarter to a third against the
# defaults, capacity up a rate step, more words late (a sentence's first second plays before its one call answers).
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "device: $GPU"
case $GPU in *H200*) R0=240,270,300 B0=390 ;; *) R0=180,240,270 B0=330 ;; esac
STAGES=slo,report BENCH3S=0 \
  NEW_SERVE="--engine-option aligner_group_ms=0 --engine-option aligner_gather_ms=${GATHER_MS:-120}" \
  RATES=${RATES:-$R0} BASE_RATES=${BASE_RATES:-$B0} REPORT=${REPORT:-nohold-c128} DEFAULTS_ARM=1 \
  DEFAULTS_RATES=${DEFAULTS_RATES:-$R0} ELAPSED_CAP=${ELAPSED_CAP:-440} bash tests/aligner/gpu_aligner.sh

#!/usr/bin/env bash
# Prepared in the nineteenth session (2026-12-07), not yet run: the aligner's host operations cut (510 -> 132 a
# 56-clip call, c002e77) in the loop, word times not held, against the tree before it (56e5cd3) on the same card:
#   git archive 56e5cd3 engine kernels gateway web configs | gzip -9 > .baseline/56e5cd3.tar.gz
#   run(command="bash docs/benchmarks/h200-word-times/dispatch-1207s/call.sh",
#       carry=[".whl", ".gpu_shared", ".tcache", ".baseline"])
# 1. this tree: sentence SLO capacity not held (RATES), without word times on the same server (BASE_RATES), closed
#    c = 128 not held
# 2. the baseline tree's server: not held at the same rates, closed c = 128 not held
# Expected: shorter aligner calls (voxgate_engine_aligner_call_seconds; ~100-140 ms a call near capacity on an
# H100, 80 % of it host time), so fewer words late and more audio at c = 128 (616 audio-s/s on the defaults);
# capacity may not move (the misses near capacity are refusals for slots while the steps share the GPU).
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "device: $GPU"
case $GPU in *H200*) R0=270,300,330 B0=390 ;; *) R0=270,300 B0=360 ;; esac
STAGES=slo,report BENCH3S=0 RATES=${RATES:-$R0} BASE_RATES=${BASE_RATES:-$B0} REPORT="nohold-c128" \
  DEFAULTS_ARM=1 DEFAULTS_TREE=base BASE=.baseline/56e5cd3.tar.gz DEFAULTS_RATES=${RATES:-$R0} \
  ELAPSED_CAP=${ELAPSED_CAP:-400} bash tests/aligner/gpu_aligner.sh

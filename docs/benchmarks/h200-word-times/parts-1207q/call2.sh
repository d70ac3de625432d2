#!/usr/bin/env bash
# 2026-12-07 seventeenth session, second call: which of an aligner call's host parts holds it up in the loop
# (voxgate_engine_aligner_part_seconds now splits `host` into resample, prepare and queue, and
# voxgate_engine_aligner_host_cpu_seconds is the aligner thread's CPU time in them: the rest is waiting), word times
# not held, on one server with the engine's defaults: idle, c = 1 and c = 128 (closed loop).
#   run(command="bash docs/benchmarks/h200-word-times/parts-1207q/call2.sh", carry=[".whl", ".gpu_shared", ".tcache"])
STAGES=report BENCH3S=0 REPORT="nohold-idle nohold-c1 nohold-c128" ELAPSED_CAP=${ELAPSED_CAP:-300} \
  bash tests/aligner/gpu_aligner.sh

#!/usr/bin/env bash
# 2026-12-07 seventeenth session, third call: what an aligner call's host time goes to at c = 128 (word times not
# held, the engine's defaults): torch's profiler around 30 of its calls (engine option aligner_profile), their
# operations' self CPU time by thread and the allocators' counters, into profile-c128.md.
#   run(command="bash docs/benchmarks/h200-word-times/parts-1207q/call3.sh", carry=[".whl", ".gpu_shared", ".tcache"])
STAGES=report BENCH3S=0 REPORT="nohold-c128" ELAPSED_CAP=${ELAPSED_CAP:-240} \
  NEW_SERVE="--engine-option aligner_profile=/tmp/aligner-results/profile-c128.md:${FIRST:-150}:30" \
  bash tests/aligner/gpu_aligner.sh
head -c 6000 /tmp/aligner-results/profile-c128.md 2>/dev/null || grep -i "aligner_profile\|error" /tmp/aligner-results/server-report.log | head

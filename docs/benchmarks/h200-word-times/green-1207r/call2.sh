#!/usr/bin/env bash
# 2026-12-07 eighteenth session, the last device call (ran at 4dcf6de; the engine option aligner_sms was removed
# after it, so part 1 runs only on that commit): both SM-limited streams, their graphs captured in their green
# contexts (probe2.py), one machine, from the repo root:
#   run(command="bash docs/benchmarks/h200-word-times/green-1207r/call2.sh", carry=[".whl", ".gpu_shared", ".tcache"])
# 1. issue 28: a server with aligner_sms = 32: sentence SLO capacity with word times not held (270 / 300 / 330
#    req/s), then without word times on the same server (360): the share the aligner costs (-25 % with the defaults
#    on H100s, 270 against 360, fourth and seventeenth sessions)
# 2. issue 27: closed c = 8, the defaults against codec_sms = 32 (a server each)
# Expected: (1) if the aligner's GEMMs on 32 SMs stop multiplying the steps' time (probe2: a chain 5.5x its time alone
# beside a flood on every SM, 1.15x beside one on 32), capacity not held nearer 360 than 270; (2) up to ~0.38 ms of a
# 4.6-ms period back at c = 8 (~132 -> ~143 audio-s/s).
OUT=${OUT:-/tmp/out}; T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
STAGES=slo BENCH3S=0 RATES=${RATES:-270,300,330} BASE_RATES=${BASE_RATES:-360} \
  NEW_SERVE="--engine-option aligner_sms=${SMS:-32}" ELAPSED_CAP=${ELAPSED_CAP:-200} \
  timeout ${ALIGNER_S:-300} bash tests/aligner/gpu_aligner.sh
t aligner
SKIP_CKPT=1 STAGES=variants VARIANT_C=8 VARIANT_RATES="" VARIANT_S=${VARIANT_S:-75} \
  VARIANTS=${VARIANTS:-"default: codec32:codec_sms=32"} bash tests/qwen3tts/gpu_loop.sh 2>&1 \
  | grep -v "triton cache\|^torch" | tail -8
t end

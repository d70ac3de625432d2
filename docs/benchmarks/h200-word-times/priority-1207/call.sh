# One device call on the warm H100 right after ../../h200-step-profile/codec-gemv-pdl-1207/call.sh (tree 9c60172;
# /tmp/ck17 written by that call): not held with aligner_priority = high, then without word times on the same
# server, then not held on a server with the defaults (aligner_priority = normal).
SKIP_CKPT=1 STAGES=slo,report BENCH3S=0 NEW_SERVE="--engine-option aligner_priority=high" RATES=240,270,300 \
  BASE_RATES=330,360 REPORT="nohold-idle nohold-c128" DEFAULTS_ARM=1 DEFAULTS_RATES=240,270 \
  timeout 560 bash tests/aligner/gpu_aligner.sh

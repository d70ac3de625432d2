#!/usr/bin/env bash
# Prepared in the twenty-third session (2026-12-07, no device lent): the aligner in a process of its own under NVIDIA
# MPS against a thread, with the capacity search above 240 req/s that process-mps-1207v never made (both arms held
# its two rates, 180 and 240; there the process arm's period was 9.6 against 10.3 ms and its event loop's lag p99
# 9.8 against 19.9 ms, README "What sets sentence capacity with word times"). The engine option aligner_process was
# removed from main (1f361ef); this call applies it to the device's copy of the tree from aligner_process.patch
# (`git diff 1f361ef 1f361ef^ -- engine tests`, rebased in the twenty-fourth session onto ce40aae, where a not-held
# sentence is aligned whole and its calls gathered by default, so both arms run those defaults; applied there, its
# CPU tests tests/aligner/test_process.py, test_worker.py, test_progressive.py and tests/qwen3tts/test_word_times.py
# passed: 51), one
# tree, one card:
#   run(command="bash docs/benchmarks/h200-word-times/process-mps-rates-1207w/call.sh", carry=[".whl", ".gpu_shared", ".tcache"], timeout_s=590)
# 1. the MPS daemon; a server with aligner_process = true: SLO capacity not held (RATES), closed c = 128 not held
# 2. a server on the defaults (a thread) under the same daemon: the same rates, closed c = 128 not held
# Expected: if the event loop's lag (the GIL the aligner's thread holds) is what fails windows on this host, the
# process arm holds a rate step more (330 against 300 on an H100); if the steps' period (the aligner's GPU work) is,
# both fail at the same rate. Closed c = 128 as in process-mps-1207v (process 11 % lower).
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "device: $GPU"
HERE=docs/benchmarks/h200-word-times/process-mps-rates-1207w
# git apply works in a plain directory too; patch(1) where git is missing. Reversed on exit: a warm machine keeps
# untracked files between calls.
if git apply "$HERE/aligner_process.patch" 2>/dev/null; then UNDO="git apply -R $HERE/aligner_process.patch"
elif patch -p1 --forward < "$HERE/aligner_process.patch" > /dev/null; then UNDO="patch -p1 -R -i $HERE/aligner_process.patch"
else echo "aligner_process.patch did not apply"; exit 1; fi
echo "aligner_process applied"; trap '$UNDO > /dev/null' EXIT
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d && echo "MPS daemon started for the servers" || echo "MPS daemon did not start"
case $GPU in *H200*) R0=270,330,360 ;; *) R0=240,300,330 ;; esac  # the thread held 300 on an H100 (whole-gather-1207w)
STAGES=slo,report BENCH3S=0 NEW_SERVE="--engine-option aligner_process=true" RATES=${RATES:-$R0} BASE_RATES=none \
  REPORT=${REPORT:-nohold-c128} DEFAULTS_ARM=1 DEFAULTS_RATES=${DEFAULTS_RATES:-$R0} \
  ELAPSED_CAP=${ELAPSED_CAP:-440} bash tests/aligner/gpu_aligner.sh
echo "MPS log:"; tail -5 "$CUDA_MPS_LOG_DIRECTORY"/control.log 2>/dev/null
echo quit | nvidia-cuda-mps-control

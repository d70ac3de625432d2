#!/usr/bin/env bash
# Prepared in the twenty-first session (2026-12-07); its first run (twenty-second session, H100) showed the daemon
# starts, but its kernels (torch.cuda._sleep) could not tell time-slicing from overlap; overlap.py now spins a fixed
# count of instructions instead (~1-2 min of device time): can the device run
# NVIDIA MPS, and do two processes' kernels then run side by side? The aligner in a process of its own (its own
# GIL, so none of its Python or its CUDA calls' waits beside the loop's threads) was measured no faster on
# 2026-12-06 because the GPU time-sliced the two processes' contexts; under MPS they would share the SMs as two
# streams of one process do. From the repo root (no carry needed: torch is on the machine):
#   run(command="bash docs/benchmarks/h200-word-times/mps-probe/probe.sh")
nvidia-smi --query-gpu=name,compute_mode --format=csv,noheader
command -v nvidia-cuda-mps-control || echo "nvidia-cuda-mps-control: not found"
python3 docs/benchmarks/h200-word-times/mps-probe/overlap.py --procs 2
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
if nvidia-cuda-mps-control -d; then
  echo "MPS daemon started"
  python3 docs/benchmarks/h200-word-times/mps-probe/overlap.py --procs 2
  echo quit | nvidia-cuda-mps-control
else
  echo "MPS daemon did not start"; cat "$CUDA_MPS_LOG_DIRECTORY"/* 2>/dev/null | tail -5
fi

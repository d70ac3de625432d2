#!/usr/bin/env bash
# Ran in the nineteenth session at 3ba0bfc (ELAPSED_CAP=330): torch's profiler window broke that server (h200-word-times README); aligner_spectrum was removed after it.
# Prepared in the seventeenth session (2026-12-07), not yet run (no device time left): aligner_spectrum = matmul (the
# features' spectrum as one GEMM, no cuFFT plan) against the defaults (fft), word times not held, on one machine:
#   run(command="bash docs/benchmarks/h200-word-times/parts-1207q/call5.sh", carry=[".whl", ".gpu_shared", ".tcache"])
# 1. spectrum.py: the two spectra's features on CUDA (the same within the CPU tests' tolerance) and ms a call
# 2. a server with matmul: sentence SLO capacity not held (RATES), without word times (BASE_RATES), closed c = 128
#    not held; torch's profiler around its calls 150-179 (profile-matmul.md: the open loop's first rate)
# 3. a server with the defaults: not held at the same rates, then closed c = 128
# Rates for an H100 (on an H200 ~30 req/s more). Expected, from call3's profile (fft, c = 128: 47.7 ms a call, 5.9 ms
# of it the aligner thread's own CPU in aten::_fft_r2c, cuFFT's plan for a new shape): ~6 ms less a call, the
# aligner keeping up longer; capacity may move either way (a faster aligner resumes partial calls).
PYTHONPATH=/tmp/site-gw:/tmp/vx bash -c 'SKIP_CKPT=1 STAGES=none bash tests/qwen3tts/gpu_loop.sh > /dev/null 2>&1;
  timeout 60 python3 docs/benchmarks/h200-word-times/parts-1207q/spectrum.py 2>&1 | grep -v -i warn'
STAGES=slo,report BENCH3S=0 RATES=${RATES:-270,300,330} BASE_RATES=${BASE_RATES:-360} REPORT="nohold-c128" \
  NEW_SERVE="--engine-option aligner_spectrum=matmul --engine-option aligner_profile=/tmp/aligner-results/profile-matmul.md:150:30" \
  DEFAULTS_ARM=1 DEFAULTS_RATES=${RATES:-270,300,330} ELAPSED_CAP=${ELAPSED_CAP:-360} bash tests/aligner/gpu_aligner.sh

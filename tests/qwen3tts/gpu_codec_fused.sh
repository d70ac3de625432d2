#!/usr/bin/env bash
# The fused codec step on the H200 in one device call, from the repo root, carrying `.whl` and `.gpu_shared`
# (see tests/gpu_check.sh):  run(command="bash tests/qwen3tts/gpu_codec_fused.sh", carry=[".whl", ".gpu_shared"])
# 1. the Triton kernels' tests and the fused stream's tests, compiled on CUDA;
# 2. bench_codec (real shapes): exactness, bf16 SNR and step speed of the paths in $PATHS (default: fused).
set -o pipefail
export PYTHONUNBUFFERED=1 VOXGATE_SHARED=$PWD/.gpu_shared
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
mkdir -p /tmp/vx/voxgate
for d in engine gateway kernels web configs; do ln -sfn "$PWD/$d" "/tmp/vx/voxgate/$d"; done
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:/tmp/vx
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
timeout "${TEST_TIMEOUT:-240}" python3 -m pytest ${TESTS:-tests/qwen3tts/test_causal_conv.py \
  tests/qwen3tts/test_ring_attention.py tests/qwen3tts/test_codec_norms.py tests/qwen3tts/test_codec_fused.py} -c /dev/null --confcutdir=tests/qwen3tts \
  -p no:cacheprovider -q -rs -x -W ignore::pytest.PytestUnknownMarkWarning 2>&1 | tail -25 | tee "$OUT/pytest.log"
timeout "${BENCH_TIMEOUT:-420}" python3 -m voxgate.engine.qwen3tts.bench_codec --out "$OUT/codec" \
  --paths "${PATHS:-fused}" --iters "${ITERS:-30}" --watchdog "${WATCHDOG:-0}" ${BENCH_ARGS:-} > "$OUT/bench.log" 2>&1
tail -c 6000 "$OUT/bench.log"

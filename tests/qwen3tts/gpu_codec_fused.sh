#!/usr/bin/env bash
# The fused codec step on the H200 in one device call, from the repo root, carrying `.whl` and `.gpu_shared`
# (see tests/gpu_check.sh):  run(command="bash tests/qwen3tts/gpu_codec_fused.sh", carry=[".whl", ".gpu_shared"])
# 1. the Triton kernels' tests and the fused stream's tests, compiled on CUDA;
# 2. bench_codec (real shapes): exactness, bf16 SNR and step speed of the paths in $PATHS (default: fused).
source tests/gpu_env.sh
timeout "${TEST_TIMEOUT:-240}" python3 -m pytest ${TESTS:-tests/qwen3tts/test_causal_conv.py \
  tests/qwen3tts/test_ring_attention.py tests/qwen3tts/test_codec_norms.py tests/qwen3tts/test_codec_fused.py} -c /dev/null --confcutdir=tests/qwen3tts \
  -p no:cacheprovider -q -rs -x -W ignore::pytest.PytestUnknownMarkWarning 2>&1 | tail -25 | tee "$OUT/pytest.log"
timeout "${BENCH_TIMEOUT:-420}" python3 -m voxgate.engine.qwen3tts.bench_codec --out "$OUT/codec" \
  --paths "${PATHS:-fused}" --iters "${ITERS:-30}" --watchdog "${WATCHDOG:-0}" ${BENCH_ARGS:-} > "$OUT/bench.log" 2>&1
tail -c 6000 "$OUT/bench.log"

#!/usr/bin/env bash
# The fused codec step on the H200 in one device call, from the repo root, carrying `.whl` and `.gpu_shared`
# (see tests/gpu_check.sh):  run(command="bash tests/qwen3tts/gpu_codec_fused.sh", carry=[".whl", ".gpu_shared"])
# 0. SMOKE=1: a real-shape checkpoint and the qwen3tts engine's smoke run first (tests/qwen3tts/gpu_engine_smoke.py);
# 1. the Triton kernels' tests and the fused stream's tests, compiled on CUDA (TESTS=skip: none);
# 2. `voxgate bench codec` (real shapes; BENCH=skip: none): exactness, bf16 SNR and step speed of the paths in
#    $PATHS (default: fused);
# 3. BENCH2_ARGS set: a second `bench codec` run with those arguments into $OUT/codec2 (tuned tiles are reused).
source tests/gpu_env.sh
if [ "${SMOKE:-0}" = 1 ]; then
  python3 tests/qwen3tts/gpu_bench.py write --out /tmp/ck17 --json /tmp/write.json 2>&1 | tail -2
  timeout "${SMOKE_TIMEOUT:-150}" python3 tests/qwen3tts/gpu_engine_smoke.py /tmp/ck17 2>&1 | tail -6 \
    | tee "$OUT/engine_smoke.log"
fi
if [ "${TESTS:-}" != skip ]; then
  timeout "${TEST_TIMEOUT:-240}" python3 -m pytest ${TESTS:-tests/kernel/test_causal_conv.py \
    tests/kernel/test_conv_tma.py tests/kernel/test_ring_attention.py tests/kernel/test_codec_norms.py \
    tests/qwen3tts/test_codec_fused.py tests/qwen3tts/test_codec_runner.py} \
    -c /dev/null --confcutdir=tests -p no:cacheprovider -q -rs -x -W ignore::pytest.PytestUnknownMarkWarning \
    2>&1 | tail -25 | tee "$OUT/pytest.log"
fi
if [ "${BENCH:-}" != skip ]; then
  timeout "${BENCH_TIMEOUT:-420}" python3 -m voxgate.gateway.cli bench codec --out "$OUT/codec" \
    --paths "${PATHS:-fused}" --iters "${ITERS:-30}" --watchdog "${WATCHDOG:-0}" ${BENCH_ARGS:-} > "$OUT/bench.log" 2>&1
  tail -c 3000 "$OUT/bench.log"
fi
if [ -n "${BENCH2_ARGS:-}" ]; then
  timeout "${BENCH2_TIMEOUT:-300}" python3 -m voxgate.gateway.cli bench codec --out "$OUT/codec2" \
    --paths "${PATHS:-fused}" --iters "${ITERS:-30}" $BENCH2_ARGS > "$OUT/bench2.log" 2>&1
  tail -c 3000 "$OUT/bench2.log"
fi

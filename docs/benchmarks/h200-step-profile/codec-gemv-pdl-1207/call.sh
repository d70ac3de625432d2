# One device call (H100, 2026-12-07, fourteenth session), tree 9c60172, carrying .whl and .gpu_shared:
# the codec's GPU tests, the three engine arms through the gateway, then the codec bench in the time left.
export TRITON_CACHE_DIR=/tmp/tcache; mkdir -p $TRITON_CACHE_DIR; T0=$(date +%s)
TESTS="tests/qwen3tts/test_codec_fused.py tests/kernel/test_ring_attention.py" TEST_TIMEOUT=150 BENCH=skip \
  bash tests/qwen3tts/gpu_codec_fused.sh
STAGES=variants SKIP_CKPT=0 VARIANT_C=1,8 VARIANT_DUR=5 VARIANT_RATES= VARIANT_S=150 \
  VARIANTS="defaults: both:codec_gemm=gemv&codec_pdl=true gemv:codec_gemm=gemv" bash tests/qwen3tts/gpu_loop.sh
source tests/gpu_env.sh >/dev/null
timeout $(( 585 - $(date +%s) + T0 )) python3 -m voxgate.gateway.cli bench codec --out $OUT/codec \
  --paths fused,fused_gemv --iters 40 --watchdog 0 --speed-only --variants default,pdl --shapes 1x4,8x4

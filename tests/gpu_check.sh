#!/usr/bin/env bash
# Every GPU check of the project in one device call (H200), from the repo root, carrying `.whl` (the wheels of
# docs/gpu-notes.md) and `.gpu_shared` (a copy of ../shared):
#   run(command="bash tests/gpu_check.sh", carry=[".whl", ".gpu_shared"])
# The `gpu` tests (fp32 parity at real shapes against the reference, bf16 generation), the plain codec stream's
# streamed-vs-whole exactness and its runner (CUDA graphs) on CUDA, and a smoke run of the qwen3tts engine adapter.
source tests/gpu_env.sh
python3 tests/qwen3tts/gpu_bench.py write --out /tmp/ck17 --json "$OUT/write.json" 2>&1 | tail -2
VOXGATE_GPU_CKPT=/tmp/ck17 VOXGATE_GPU_RESULTS=$OUT timeout 360 python3 -m pytest tests/qwen3tts/test_gpu.py \
  tests/qwen3tts/test_codec_stream.py tests/qwen3tts/test_codec_runner.py -c /dev/null --confcutdir=tests/qwen3tts \
  -p no:cacheprovider -q -rs -W ignore::pytest.PytestUnknownMarkWarning 2>&1 | tail -15 | tee "$OUT/pytest.log"
timeout 120 python3 tests/qwen3tts/gpu_engine_smoke.py /tmp/ck17 2>&1 | tail -6 | tee "$OUT/engine_smoke.log"

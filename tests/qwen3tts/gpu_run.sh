#!/usr/bin/env bash
# One device call for docs/gpu-notes.md (H200): run from the repo root with `.whl` (transformers 4.57.3,
# tokenizers 0.22.1, huggingface_hub 0.36.0, qwen-tts 0.1.1 wheels) and `.gpu_shared` (a copy of shared/) carried.
# Our code runs first under the image's own transformers (5.x), then the reference under 4.57.3.
set -o pipefail
export PYTHONUNBUFFERED=1 VOXGATE_SHARED=$PWD/.gpu_shared
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
mkdir -p /tmp/vx/voxgate && ln -sfn "$PWD/engine" /tmp/vx/voxgate/engine && ln -sfn "$PWD/gateway" /tmp/vx/voxgate/gateway && ln -sfn "$PWD/gateway/sdk" /tmp/vx/voxgate/client
export PYTHONPATH=/tmp/vx
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv > "$OUT/gpu.txt"; cat "$OUT/gpu.txt"
B="python3 tests/qwen3tts/gpu_bench.py"
$B write --out /tmp/ck17 --json "$OUT/write.json" 2>&1 | tail -8
$B ours --ckpt /tmp/ck17 --frames 128 --json "$OUT/ours.json" 2>&1 | tail -20
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:/tmp/vx
[ -n "$SKIP_TESTS" ] || VOXGATE_GPU_CKPT=/tmp/ck17 VOXGATE_GPU_RESULTS=$OUT timeout 330 python3 -m pytest tests/qwen3tts/test_gpu.py \
  -c /dev/null --confcutdir=tests/qwen3tts -p no:cacheprovider -q -rs -W ignore::pytest.PytestUnknownMarkWarning \
  2>&1 | tail -30 | tee "$OUT/pytest.log"
[ -n "$SKIP_REF" ] || timeout 150 $B reference --ckpt /tmp/ck17 --frames 128 --json "$OUT/ref.json" 2>&1 | grep -v pad_token_id | tail -22

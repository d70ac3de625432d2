# Sourced by the device scripts (tests/gpu_check.sh, tests/qwen3tts/gpu_codec_fused.sh) from the repo root on the
# H200: the package importable as `voxgate` from this tree, the carried wheels (`.whl`) installed beside it, the
# carried copy of shared/ (`.gpu_shared`) as VOXGATE_SHARED, and $OUT ready.
set -o pipefail
export PYTHONUNBUFFERED=1 VOXGATE_SHARED=$PWD/.gpu_shared
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
mkdir -p /tmp/vx/voxgate
for d in engine gateway kernels web configs; do ln -sfn "$PWD/$d" "/tmp/vx/voxgate/$d"; done
ln -sfn "$PWD/gateway/sdk" /tmp/vx/voxgate/client; ln -sfn "$PWD/gateway/integrations" /tmp/vx/voxgate/integrations  # as pyproject maps them
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:/tmp/vx
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

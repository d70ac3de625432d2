#!/usr/bin/env bash
# One device call: `voxgate bench gpu-suite` on the H200 (synthetic checkpoint, baseline arm, gateway with the
# qwen3tts engine, warm-up, phases, report). Run from the repo root:
#   bash gateway/bench/gpu_run.sh [PROFILE] [more gpu-suite arguments]
# PROFILE: quick | eager (default: the baseline arm and the eager path in one report) | full-closed |
# full-sentences | full-passages (the batched loop's full run, one call each; join with `voxgate bench merge`).
# Carry `.whl` (the gateway's wheels, plus qwen-tts 0.1.1 with transformers 4.57.3, tokenizers and
# huggingface_hub for the reference; see docs/benchmarks.md) and `.gpu_shared` (a copy of ../shared).
# Env: CKPT (checkpoint folder, written if empty), LIKE (official checkpoint it imitates), BUDGET (s for the suite),
# VOXGATE_COMMIT (the commit to record when the copied tree has no .git: VOXGATE_COMMIT=$(git rev-parse HEAD)).
# At most 8 files come back from $OUT: report.md, report.json.gz, four PNGs, server.log.gz, suite.log.
set -o pipefail
export PYTHONUNBUFFERED=1
PROFILE=${1:-eager}
shift || true
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export VOXGATE_SHARED=${VOXGATE_SHARED:-$PWD/.gpu_shared}
[ -d "$VOXGATE_SHARED/workloads" ] && export VOXGATE_WORKLOADS=$VOXGATE_SHARED/workloads

# voxgate from this working tree without installing it: the `voxgate` namespace over the design-card layout
mkdir -p /tmp/vx/voxgate
for d in gateway engine kernels web configs; do ln -sfn "$PWD/$d" "/tmp/vx/voxgate/$d"; done
ln -sfn "$PWD/gateway/sdk" /tmp/vx/voxgate/client; ln -sfn "$PWD/gateway/integrations" /tmp/vx/voxgate/integrations  # as pyproject maps them

# the reference's wheels apart from the gateway's, so that the gateway runs on the image's transformers
mkdir -p /tmp/whl-gw /tmp/whl-ref
for w in .whl/*.whl; do
  [ -e "$w" ] || continue
  case "$(basename "$w")" in
    transformers-*|tokenizers-*|huggingface_hub-*|qwen_tts-*) cp "$w" /tmp/whl-ref/ ;;
    *) cp "$w" /tmp/whl-gw/ ;;
  esac
done
PIP="python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target"
ls /tmp/whl-gw/*.whl >/dev/null 2>&1 && { $PIP /tmp/site-gw /tmp/whl-gw/*.whl || exit 1; }
ls /tmp/whl-ref/*.whl >/dev/null 2>&1 && { $PIP /tmp/site-ref /tmp/whl-ref/*.whl || exit 1; }
export PYTHONPATH=/tmp/site-gw:/tmp/vx

python3 -m voxgate.gateway.cli bench gpu-suite --profile "$PROFILE" --out "$OUT" \
  --checkpoint "${CKPT:-/tmp/ck17}" --make-like "${LIKE:-Qwen3-TTS-12Hz-1.7B-CustomVoice}" \
  --reference-path /tmp/site-ref --budget-s "${BUDGET:-480}" "$@" 2>&1 | grep -v pad_token_id | tail -60

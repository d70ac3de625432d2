#!/usr/bin/env bash
# The gateway-only benchmark on the GPU host (no GPU needed: the fake engine), one device call, from the repo root:
#   VOXGATE_COMMIT=$(git rev-parse HEAD) bash gateway/bench/gateway_run.sh
# Carry `.whl` (the gateway's wheels, as for gpu_run.sh). Writes under $OUT: report.md of each run and summary.txt.
# Runs: PCM asap c=128 with long frames (the acceptance: >= 4,000 audio-s/s, loop lag p99 < 5 ms), the same with
# 20 ms frames (the old message size), Opus with the encoder pool and inline, 256 paced listeners and 1,000
# sessions (`voxgate bench soak`, every frame checked).
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
mkdir -p /tmp/vx/voxgate
for d in gateway engine kernels web configs; do ln -sfn "$PWD/$d" "/tmp/vx/voxgate/$d"; done
mkdir -p /tmp/whl-gw
for w in .whl/*.whl; do
  [ -e "$w" ] || continue
  case "$(basename "$w")" in transformers-*|tokenizers-*|huggingface_hub-*|qwen_tts-*) ;; *) cp "$w" /tmp/whl-gw/ ;; esac
done
ls /tmp/whl-gw/*.whl >/dev/null 2>&1 && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
  --upgrade --target /tmp/site-gw /tmp/whl-gw/*.whl
export PYTHONPATH=/tmp/site-gw:/tmp/vx
VX="python3 -m voxgate.gateway.cli"
printf 'opus_threads = 0\n' > /tmp/opus-inline.toml && grep -v '^#' configs/gateway-bench.toml >> /tmp/opus-inline.toml
printf 'opus_threads = 8\n' > /tmp/opus-pool.toml && grep -v '^#' configs/gateway-bench.toml >> /tmp/opus-pool.toml
bench() {  # name, config, more arguments
  local name=$1 config=$2; shift 2
  $VX bench run --engine fake --serve-arg=--config --serve-arg="$config" --concurrency 128 --closed-warmup 5 \
    --closed-duration 20 --no-plots --name "$name" --out "/tmp/runs/$name" "$@" 2>&1 | grep -E "closed s" \
    | sed "s/^/$name: /" | tee -a "$OUT/summary.txt"
  grep -E "event_loop_lag|gc_pause" "/tmp/runs/$name/report.md" | sed "s/^/$name: /" >> "$OUT/summary.txt"
  cp "/tmp/runs/$name/report.md" "$OUT/$name.md"
}
bench pcm-long gateway-bench --frame-ms 1280
bench pcm-20ms gateway-bench --frame-ms 20
bench opus-long-pool /tmp/opus-pool.toml --frame-ms 1280 --codec opus
bench opus-long-inline /tmp/opus-inline.toml --frame-ms 1280 --codec opus
$VX serve --config gateway-bench --port 8765 --log-level warning > /tmp/soak-server.log 2>&1 &
SERVER=$!
sleep 5
for spec in "256 client_clock 20" "1000 asap 20"; do
  set -- $spec
  $VX bench soak --url http://127.0.0.1:8765 --sessions "$1" --pacing "$2" --frame-ms "$3" --duration 30 --ramp 10 \
    --processes 8 --out "$OUT/soak-$1-$2.json" > /dev/null 2>&1
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); d.pop('plan'); print('soak $1 $2:', d)" \
    "$OUT/soak-$1-$2.json" | tee -a "$OUT/summary.txt"
done
kill "$SERVER"

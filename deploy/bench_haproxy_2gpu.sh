#!/usr/bin/env bash
# Two GPUs behind HAProxy, measured (issue 17; NOT run yet: written for an `nvidia-h200-x2` call). From the repo
# root:   bash deploy/bench_haproxy_2gpu.sh
# 1. `voxgate serve --config deploy/voxgate-gpu.toml --gpus 0,1 --port 8000`: one qwen3tts process per GPU.
# 2. HAProxy with deploy/haproxy/haproxy.cfg as shipped (8080 -> 8000, 8001; root-only lines dropped).
# 3. `voxgate bench run` against one GPU directly (:8000), then against both through HAProxy (:8080): the open-loop
#    SLO capacity of each, so the report shows the scaling factor and what the balancer costs (first audio).
# 4. Each backend's accepted sessions (the spread), then SIGTERM: both drain, the supervisor exits 0.
# The device machine has no network: carry haproxy as .deb files (on a Debian 12 machine: `apt-get download
# haproxy liblua5.3-0 libopentracing-c-wrapper0 libopentracing1` into .deb/), unpacked here into /tmp/hx. Carry the
# Python setup as gateway/bench/gpu_run.sh does (.whl); a checkpoint folder in CKPT, or a synthetic one is written.
# Env: CKPT (default /tmp/ck17), LIKE (the official checkpoint it imitates), RATES (rate search, default 4:256),
# DURATION (s per open-loop rate, default 20). Results: $OUT/one-gpu/, $OUT/two-gpus/, $OUT/spread.txt, logs.
set -euo pipefail
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=4
OUT=${OUT:-/tmp/out}
CKPT=${CKPT:-/tmp/ck17}
LIKE=${LIKE:-Qwen3-TTS-12Hz-1.7B-CustomVoice}
RATES=${RATES:-4:256}
DURATION=${DURATION:-20}
mkdir -p "$OUT"

if ! command -v haproxy >/dev/null; then
  for deb in .deb/*.deb; do dpkg -x "$deb" /tmp/hx; done
  export PATH=/tmp/hx/usr/sbin:$PATH LD_LIBRARY_PATH=/tmp/hx/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
fi
haproxy -v | head -1
VOXGATE="python3 -m voxgate.gateway.cli"
[ -f "$CKPT/config.json" ] || $VOXGATE checkpoint synth --like "$LIKE" --out "$CKPT" --device cuda

$VOXGATE serve --config deploy/voxgate-gpu.toml --gpus 0,1 --port 8000 --engine-option "model=$CKPT" \
  >"$OUT/gateways.log" 2>&1 &
SUPERVISOR=$!
grep -v root-only deploy/haproxy/haproxy.cfg >/tmp/haproxy.cfg
haproxy -db -f /tmp/haproxy.cfg >"$OUT/haproxy.log" 2>&1 &
HAPROXY=$!
trap 'kill $HAPROXY 2>/dev/null; kill $SUPERVISOR 2>/dev/null; wait' EXIT

for port in 8000 8001; do  # the first start compiles kernels and captures graphs: minutes
  for _ in $(seq 900); do curl -fs "http://127.0.0.1:$port/health" >/dev/null && break; sleep 1; done
  curl -fs "http://127.0.0.1:$port/health/load"; echo
done

bench() {  # NAME URL
  $VOXGATE bench run --url "$2" --workload sentences --concurrency '' --rate-search "$RATES" --refine 2 \
    --seeds 1 --warmup 5 --duration "$DURATION" --name "$1" --out "$OUT/$1" --meta "balancer=$1" 2>&1 | tail -20
}
bench one-gpu http://127.0.0.1:8000
bench two-gpus http://127.0.0.1:8080

for port in 8000 8001; do
  curl -fs "http://127.0.0.1:$port/metrics" | grep -E '^voxgate_sessions_accepted_total|^voxgate_engine_queue_depth'
done | tee "$OUT/spread.txt"

kill -TERM $SUPERVISOR
wait $SUPERVISOR && echo "supervisor drained both and exited 0"

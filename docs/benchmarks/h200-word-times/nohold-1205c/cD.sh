#!/usr/bin/env bash
# 2026-12-05 (third session) call D (run from .gpu_shared/calls/cD2.sh), cut to the device time left: engine option loop_stream_priority=true, word
# times not held at 270 and 300 req/s, then none at 330 (call C, without the option, H100: 88.7 % / 80.0 % in SLO
# not held, 96.1 % none).
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export PYTHONPATH=/tmp/site-gw:/tmp/vx TRITON_CACHE_DIR=/tmp/tcache VOXGATE_SHARED=$PWD/.gpu_shared VOXGATE_WORKLOADS=$PWD/.gpu_shared/workloads PYTHONUNBUFFERED=1
STAGES=none bash tests/qwen3tts/gpu_loop.sh > /tmp/setup.log 2>&1 &
SETUP=$!
sleep 10  # the wheels are in place before the aligner's writer imports them
python3 -c "from voxgate.engine.aligner.synthetic import write_synthetic_aligner as w; w('/tmp/aligner-near', tiny=False, head_classes=16, sharpen=True)" &
wait; tail -2 /tmp/setup.log; nvidia-smi --query-gpu=name --format=csv,noheader; t written
VX="python3 -m voxgate.gateway.cli"
$VX serve --config qwen3tts --engine-option model=/tmp/ck17 --engine-option aligner=/tmp/aligner-near \
  --engine-option loop_stream_priority=true --port 8012 > /tmp/server.log 2>&1 &
SERVER=$!
for _ in $(seq 300); do python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:8012/health')" 2>/dev/null && break; sleep 1; done
t serving
mkdir -p /tmp/r
bench() { name=$1; shift
  timeout ${BS:-100} $VX bench run --url http://127.0.0.1:8012 --transport ws --frame-ms 1280 --seeds 1 --warmup 3 --drain 8 \
    --no-plots --out /tmp/r/$name --name gpu-$name --concurrency "" --duration 10 --client-procs 8 "$@" 2>&1 | grep -E "open s" | sed "s/^/$name: /"; tar czf $OUT/reports.tgz -C /tmp/r . ; t $name; }
bench prio-nohold-270 --rates 270 --timestamps --timestamps-hold false
bench prio-nohold-300 --rates 300 --timestamps --timestamps-hold false
bench prio-none-330 --rates 330
kill $SERVER; wait $SERVER 2>/dev/null; grep -i -E "error|traceback" /tmp/server.log | head -3; t end

#!/usr/bin/env bash
# 2026-12-05 (third session) call A: word times not held, after the budget fix (c051c0f), against no word times
# and held, on one server with the aligner loaded; every arm in this call (the card may be an H100).
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
STAGES=none bash tests/qwen3tts/gpu_loop.sh 2>&1 | tail -4
export PYTHONPATH=/tmp/site-gw:/tmp/vx TRITON_CACHE_DIR=/tmp/tcache VOXGATE_SHARED=$PWD/.gpu_shared VOXGATE_WORKLOADS=$PWD/.gpu_shared/workloads PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
t aligner-write
[ -d /tmp/aligner-near ] || python3 -c "from voxgate.engine.aligner.synthetic import write_synthetic_aligner as w; w('/tmp/aligner-near', tiny=False, head_classes=16, sharpen=True)"
VX="python3 -m voxgate.gateway.cli"
$VX serve --config qwen3tts --engine-option model=/tmp/ck17 --engine-option aligner=/tmp/aligner-near --port 8012 > /tmp/server.log 2>&1 &
SERVER=$!
for _ in $(seq 300); do python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:8012/health')" 2>/dev/null && break; sleep 1; done
t serving
rm -f $OUT/triton.tar.gz*; tar -cz -C /tmp/tcache . | split -b 15M - "$OUT/triton.tar.gz.part-"
mkdir -p /tmp/r
bench() { name=$1; shift
  timeout ${BS:-90} $VX bench run --url http://127.0.0.1:8012 --transport ws --frame-ms 1280 --seeds 1 --warmup 3 --drain 8 \
    --no-plots --out /tmp/r/$name --name gpu-$name "$@" 2>&1 | grep -E "closed s|open s" | sed "s/^/$name: /"; }
NOHOLD="--timestamps --timestamps-hold false"
bench none-idle --concurrency "" --rates 1 --duration 12
bench nohold-idle --concurrency "" --rates 1 --duration 12 $NOHOLD
bench hold-idle --concurrency "" --rates 1 --duration 12 --timestamps
t closed
bench none-closed --concurrency 1,8,32 --closed-warmup 3 --closed-duration 10 --rates ""
bench nohold-closed --concurrency 1,8,32 --closed-warmup 3 --closed-duration 10 --rates "" $NOHOLD
t open
for r in 240 200; do
  bench none-open$r --concurrency "" --rates $r --duration 10 --client-procs 8
  bench nohold-open$r --concurrency "" --rates $r --duration 10 --client-procs 8 $NOHOLD
done
python3 -c "import urllib.request as u; print(u.urlopen('http://127.0.0.1:8012/metrics').read().decode())" | grep aligner > /tmp/r/metrics.txt
kill $SERVER; wait $SERVER 2>/dev/null
t end; cp /tmp/server.log /tmp/r/; tar czf $OUT/reports.tgz -C /tmp/r . ; ls $OUT

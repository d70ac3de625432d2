#!/usr/bin/env bash
# 2026-12-05 final call: word times not held (session timestamps_hold false) against held, on one server with the
# aligner loaded (default options); the aligner alone at 1 and 128 clips; the step bench with the 4-way draw.
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
[ -d /tmp/ck17 ] || STAGES=none bash tests/qwen3tts/gpu_loop.sh > /dev/null 2>&1
export PYTHONPATH=/tmp/site-gw:/tmp/vx TRITON_CACHE_DIR=/tmp/tcache VOXGATE_SHARED=$PWD/.gpu_shared VOXGATE_WORKLOADS=$PWD/.gpu_shared/workloads
[ -d /tmp/aligner-near ] || python3 -c "from voxgate.engine.aligner.synthetic import write_synthetic_aligner as w; w('/tmp/aligner-near', tiny=False, head_classes=16, sharpen=True)"
VX="python3 -m voxgate.gateway.cli"
t aligner-bench
for enc in eager captured; do
  timeout 100 python3 -m voxgate.engine.aligner.bench --checkpoint /tmp/aligner-near --batches 1,128 --seconds 3 --dtype bf16 --encoder $enc --json $OUT/aligner-bench-3s-$enc.json 2>&1 | tail -3
done
$VX serve --config qwen3tts --engine-option model=/tmp/ck17 --engine-option aligner=/tmp/aligner-near --port 8012 > /tmp/server.log 2>&1 &
SERVER=$!
for _ in $(seq 150); do python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:8012/health')" 2>/dev/null && break; sleep 1; done
t serving
bench() { name=$1; shift
  timeout ${BS:-90} $VX bench run --url http://127.0.0.1:8012 --transport ws --frame-ms 1280 --seeds 1 --warmup 3 --drain 8 \
    --no-plots --out /tmp/r/$name --name h200-$name "$@" 2>&1 | grep -E "closed s|open s" | sed "s/^/$name: /"; }
NOHOLD="--timestamps --timestamps-hold false"
bench nohold-idle --concurrency "" --rates 1 --duration 12 $NOHOLD
bench hold-idle --concurrency "" --rates 1 --duration 12 --timestamps
bench nohold-closed --concurrency 1,8,32 --closed-warmup 3 --closed-duration 10 --rates "" $NOHOLD
for r in 120 240; do
  bench none-open$r --concurrency "" --rates $r --duration 10 --client-procs 8
  bench nohold-open$r --concurrency "" --rates $r --duration 10 --client-procs 8 $NOHOLD
done
python3 -c "import urllib.request as u; print(u.urlopen('http://127.0.0.1:8012/metrics').read().decode())" | grep aligner > $OUT/metrics.txt
kill $SERVER; wait $SERVER 2>/dev/null
t steps; timeout 120 $VX bench steps --checkpoint /tmp/ck17 --out /tmp/r/steps --engine-option row_buckets=1,8,64 --engine-option prefill_buckets=64 2>&1 | grep -v "it/s\]" | tail -3
t end; cp /tmp/server.log /tmp/r/; tar czf $OUT/reports.tgz -C /tmp/r . ; ls $OUT

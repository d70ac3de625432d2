#!/usr/bin/env bash
# session 1204b call 4: issue 27's SLO capacity in contract-length windows (60 s): sentences at 320 req/s and
# passages at 48 req/s, one --config qwen3tts server (defaults)
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
STAGES=none bash tests/qwen3tts/gpu_loop.sh > /dev/null 2>&1
export PYTHONPATH=/tmp/site-gw:/tmp/vx TRITON_CACHE_DIR=/tmp/tcache VOXGATE_SHARED=$PWD/.gpu_shared VOXGATE_WORKLOADS=$PWD/.gpu_shared/workloads
VX="python3 -m voxgate.gateway.cli"; R=/tmp/r4; mkdir -p $R
t serve
$VX serve --config qwen3tts --engine-option model=/tmp/ck17 --port 8012 > $R/server.log 2>&1 &
SERVER=$!
for _ in $(seq 120); do python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:8012/health')" 2>/dev/null && break; sleep 1; done
t serving
bench() { name=$1; shift; t "$name"
  timeout 200 $VX bench run --url http://127.0.0.1:8012 --transport ws --frame-ms 1280 --concurrency "" --seeds 1 \
    --warmup 5 --no-plots --client-procs 8 --out $R/$name --name h200-$name "$@" 2>&1 | grep -E "open s|open p" ; }
bench sentences-60s --rates 320 --duration 60 --drain 15
bench passages-60s --workload passages --rates 48 --duration 60 --drain 45
python3 -c "import urllib.request as u; print(u.urlopen('http://127.0.0.1:8012/metrics').read().decode())" > $R/metrics.txt
kill $SERVER; wait $SERVER 2>/dev/null; gzip $R/server.log
t end; tar -czf $OUT/r4.tar.gz -C $R .; ls -la $OUT

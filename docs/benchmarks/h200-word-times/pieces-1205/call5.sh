#!/usr/bin/env bash
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
[ -d /tmp/ck17 ] || STAGES=none bash tests/qwen3tts/gpu_loop.sh > /dev/null 2>&1
export PYTHONPATH=/tmp/site-gw:/tmp/vx TRITON_CACHE_DIR=/tmp/tcache VOXGATE_SHARED=$PWD/.gpu_shared VOXGATE_WORKLOADS=$PWD/.gpu_shared/workloads
[ -d /tmp/aligner-near ] || python3 -c "from voxgate.engine.aligner.synthetic import write_synthetic_aligner as w; w('/tmp/aligner-near', tiny=False, head_classes=16, sharpen=True)"
VX="python3 -m voxgate.gateway.cli"
serve() { name=$1; shift; t "serve $name ($*)"
  $VX serve --config qwen3tts --engine-option model=/tmp/ck17 --port 8012 "$@" > $OUT/server-$name.log 2>&1 &
  SERVER=$!
  for _ in $(seq 150); do python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:8012/health')" 2>/dev/null && break; sleep 1; done
  t "serving"; }
stop() { python3 -c "import urllib.request as u; print(u.urlopen('http://127.0.0.1:8012/metrics').read().decode())" | grep aligner > $OUT/metrics-$1.txt 2>/dev/null
  kill $SERVER; wait $SERVER 2>/dev/null; }
bench() { name=$1; shift
  timeout ${BS:-90} $VX bench run --url http://127.0.0.1:8012 --transport ws --frame-ms 1280 --seeds 1 --warmup 3 --drain 8 \
    --no-plots --out $OUT/$name --name h200-$name "$@" 2>&1 | grep -E "closed s|open s" | sed "s/^/$name: /"; }
closed() { bench $1-closed --concurrency $2 --closed-warmup 3 --closed-duration 10 --rates "" "${@:3}"; }
serve none
bench none-idle --concurrency "" --rates 1 --duration 12; closed none 1,8,32; stop none
serve whole --engine-option aligner=/tmp/aligner-near --engine-option aligner_encoder_graphs=true --engine-option aligner_group_ms=0
closed whole 8,32 --timestamps; stop whole
for depth in layers layers_attend; do
  t "steps $depth"; timeout 150 $VX bench steps --checkpoint /tmp/ck17 --out /tmp/steps-$depth \
    --engine-option depth=$depth --engine-option row_buckets=1,8,64 --engine-option prefill_buckets=64 2>&1 | grep -v "it/s\]" | tail -3
done
t end; cd $OUT && tar czf reports.tgz *-idle *-closed server-*.log -C /tmp steps-layers steps-layers_attend && rm -rf *-idle *-closed server-*.log; ls $OUT

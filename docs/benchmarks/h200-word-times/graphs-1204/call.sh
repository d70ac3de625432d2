#!/usr/bin/env bash
# session 1204b call 3: word times (issue 28) with the packed decoder, with aligner_graphs, with a first clause;
# pipeline_min_rows=0 against 4 at 1 req/s (first audio with 1-3 streams running)
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
STAGES=none bash tests/qwen3tts/gpu_loop.sh > /dev/null 2>&1
export PYTHONPATH=/tmp/site-gw:/tmp/vx TRITON_CACHE_DIR=/tmp/tcache VOXGATE_SHARED=$PWD/.gpu_shared VOXGATE_WORKLOADS=$PWD/.gpu_shared/workloads
timeout 60 python3 -m voxgate.engine.aligner.bench --checkpoint /tmp/aligner-full --write-synthetic full --batches 1,128 --seconds 3 --dtype bf16 --json $OUT/aligner-bench.json 2>&1 | tail -3
{ echo 'word_times_first_clause_words = 4'; cat configs/qwen3tts.toml; } > /tmp/clause.toml
VX="python3 -m voxgate.gateway.cli"
serve() { name=$1; config=$2; shift 2; t "serve $name ($*)"
  $VX serve --config $config --engine-option model=/tmp/ck17 --port 8012 "$@" > $OUT/server-$name.log 2>&1 &
  SERVER=$!
  for _ in $(seq 120); do python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:8012/health')" 2>/dev/null && break; sleep 1; done
  t "serving"; }
stop() { python3 -c "import urllib.request as u; print(u.urlopen('http://127.0.0.1:8012/metrics').read().decode())" > $OUT/metrics-$1.txt 2>/dev/null
  kill $SERVER; wait $SERVER 2>/dev/null; }
bench() { name=$1; shift
  timeout ${BS:-90} $VX bench run --url http://127.0.0.1:8012 --transport ws --frame-ms 1280 --seeds 1 --warmup 3 --drain 8 \
    --no-plots --out $OUT/$name --name h200-$name "$@" 2>&1 | grep -E "closed s|open s" | sed "s/^/$name: /"; }
idle() { bench $1-idle --concurrency "" --rates 1 --duration 12 "${@:2}"; }
closed() { bench $1-closed --concurrency 1,8,32 --closed-warmup 3 --closed-duration 10 --rates "" "${@:2}"; }
serve packed qwen3tts --engine-option aligner=/tmp/aligner-full
idle packed-off; idle packed --timestamps; closed packed --timestamps; stop packed
serve graphs qwen3tts --engine-option aligner=/tmp/aligner-full --engine-option aligner_graphs=true
idle graphs --timestamps; closed graphs --timestamps; stop graphs
serve clause /tmp/clause.toml --engine-option aligner=/tmp/aligner-full --engine-option aligner_graphs=true
idle clause --timestamps; closed clause --timestamps; stop clause
serve p0 qwen3tts --engine-option pipeline_min_rows=0
idle p0-off; stop p0
t end; gzip $OUT/server-*.log; ls $OUT | head -40

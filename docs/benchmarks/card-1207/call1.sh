#!/usr/bin/env bash
# session 1207 (fifteenth) call 1: issue 27's card on the defaults, and the GPU tests not yet run on a GPU.
#   run(command="bash docs/benchmarks/card-1207/call1.sh", carry=[".whl", ".gpu_shared", ".tcache"])
# 1. checkpoint (1.7B CustomVoice, synthetic) and tests: rope_rows' bits (test_ring_attention) and the fused codec stream
# 2. closed loop c = 1, 8, 128, 256 and open 1 req/s (idle first audio), one server on the defaults
# 3. one `voxgate serve --config qwen3tts` server: cold start to /health, then SLO capacity in 60 s windows
#    (sentences 320 req/s, passages 48 req/s, 8 client processes)
# CARD_OPTIONS: engine options of the card's server (option=value[&option=value]; call1b.sh sets a timeline window);
# CARD_TESTS / CARD_TESTS_K: the GPU tests first and their -k; TESTS_S / CARD_S / PASS_DRAIN: the tests' limit, the card's limit and the passages' drain, in seconds.
OUT=${OUT:-/tmp/out}; T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
STAGES=tests TESTS=${CARD_TESTS:-"tests/kernel/test_ring_attention.py tests/qwen3tts/test_codec_fused.py"} \
  TESTS_K=${CARD_TESTS_K:-} TESTS_S=${TESTS_S:-150} \
  bash tests/qwen3tts/gpu_loop.sh 2>&1 | grep -v "^\[.*s\] triton\|^torch" | tail -30
t card
SKIP_CKPT=1 STAGES=variants VARIANT_C=${CARD_C:-1,8,128,256} VARIANT_DUR=15 VARIANT_S=${CARD_S:-200} VARIANTS="card:${CARD_OPTIONS:-}" \
  bash tests/qwen3tts/gpu_loop.sh 2>&1 | grep -E "closed s|open s|variant" | tail -8
export PYTHONPATH=/tmp/site-gw:/tmp/vx TRITON_CACHE_DIR=/tmp/tcache VOXGATE_SHARED=$PWD/.gpu_shared VOXGATE_WORKLOADS=$PWD/.gpu_shared/workloads
VX="python3 -m voxgate.gateway.cli"; R=/tmp/res/slo; mkdir -p $R
t serve
S0=$(date +%s.%N)
$VX serve --config qwen3tts --engine-option model=/tmp/ck17 --port 8012 > $R/server.log 2>&1 &
SERVER=$!
for _ in $(seq 240); do python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:8012/health')" 2>/dev/null && break; sleep 0.5; done
python3 -c "print(f'cold start to /health: {$(date +%s.%N) - $S0:.1f} s')" | tee $R/cold-start.txt
bench() { name=$1; shift; t "$name"
  timeout ${SLO_S:-150} $VX bench run --url http://127.0.0.1:8012 --transport ws --frame-ms 1280 --concurrency "" --seeds 1 \
    --warmup 5 --no-plots --client-procs 8 --out $R/$name --name card-$name "$@" 2>&1 | grep -E "open s|open p" ; }
bench sentences-60s --rates ${SENT_RATE:-320} --duration 60 --drain 15
tar -czf $OUT/results.tar.gz -C /tmp/res .
bench passages-60s --workload passages --rates ${PASS_RATE:-48} --duration 60 --drain ${PASS_DRAIN:-40}
python3 -c "import urllib.request as u; print(u.urlopen('http://127.0.0.1:8012/metrics').read().decode())" > $R/metrics.txt
kill $SERVER; wait $SERVER 2>/dev/null; gzip -f $R/server.log
t end; tar -czf $OUT/results.tar.gz -C /tmp/res .; ls -la $OUT

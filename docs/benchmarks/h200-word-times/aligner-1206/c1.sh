#!/usr/bin/env bash
# 2026-12-06 call 1: where the aligner's GPU time goes (issue 28's 10 % bound). The aligner's GPU tests (prefill
# attention and packed windows new); the aligner bench, profiled, on clips like the loop's
# (0.5-3.5 s; the loop's calls averaged 54 clips of 1.9 s): as main ran it (graphs for 32 clips and 64 chunks, a
# window a row, attention a token at a time), then with all three changes (graphs for 64 clips and 256 chunks,
# packed windows, prefill attention); sentence SLO capacity with word times not held on a server with all three;
# then sentence SLO capacity without word times (the same build: the baseline on this card); then, time left, each
# change alone.
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
el() { echo $(( $(date +%s) - T0 )); }
STAGES=none bash tests/qwen3tts/gpu_loop.sh 2>&1 | tail -3
export PYTHONPATH=/tmp/site-gw:/tmp/vx TRITON_CACHE_DIR=/tmp/tcache VOXGATE_SHARED=$PWD/.gpu_shared VOXGATE_WORKLOADS=$PWD/.gpu_shared/workloads PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p /tmp/r
save() { tar czf $OUT/reports.tgz -C /tmp/r . ; }
timeout 100 python3 -m pytest tests/aligner/test_batch.py tests/aligner/test_encoder_graphs.py tests/kernel/test_prefill_attention.py \
  -k "cuda or prefill" -c /dev/null --confcutdir=tests -p no:cacheprovider -q -rs -W ignore::pytest.PytestUnknownMarkWarning 2>&1 | tail -6 | tee /tmp/r/pytest.txt
t tests; save
timeout 30 python3 -m voxgate.kernels.bench prefill_attention 2>&1 | tail -3 | tee /tmp/r/kernel-bench.txt
[ -d /tmp/aligner-near ] || python3 -c "from voxgate.engine.aligner.synthetic import write_synthetic_aligner as w; w('/tmp/aligner-near', tiny=False, head_classes=16, sharpen=True)"
t aligner-written
AB="python3 -m voxgate.engine.aligner.bench --checkpoint /tmp/aligner-near --dtype bf16 --encoder captured --decoder-graphs --seconds 0.5-3.5 --profile --warmup 1 --runs 3"
BIG="--graph-clips 64 --graph-chunks 256"
ab() { name=$1; shift; timeout 90 $AB --json /tmp/r/bench-$name.json "$@" > /tmp/r/bench-$name.txt 2>&1; sed -n 1,5p /tmp/r/bench-$name.txt | sed "s/^/$name: /"; t "bench $name"; save; }
ab main --batches 1,32,54 --no-pack-windows
ab bigpre --batches 32,54,64 $BIG --prefill-attention
VX="python3 -m voxgate.gateway.cli"
arm() { name=$1; shift
  $VX serve --config qwen3tts --engine-option model=/tmp/ck17 --engine-option aligner=/tmp/aligner-near --port 8012 "$@" > /tmp/r/server-$name.log 2>&1 &
  SERVER=$!
  for _ in $(seq 200); do kill -0 $SERVER 2>/dev/null || { tail -5 /tmp/r/server-$name.log; break; }; python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:8012/health')" 2>/dev/null && break; sleep 1; done
  t "$name serving"
  timeout 120 $VX bench run --url http://127.0.0.1:8012 --transport ws --frame-ms 1280 --seeds 1 --warmup 3 --drain 8 \
    --no-plots --out /tmp/r/$name --name gpu-$name --concurrency "" --duration 10 --client-procs 8 --rates ${RATES:-240,270,300} \
    ${BX---timestamps --timestamps-hold false} 2>&1 | grep -E "open s|capacity" | sed "s/^/$name: /"
  python3 -c "import urllib.request as u; print(u.urlopen('http://127.0.0.1:8012/metrics').read().decode())" | grep -E "aligner|refusals|engine_frames" > /tmp/r/metrics-$name.txt
  kill $SERVER; wait $SERVER 2>/dev/null; save; t "$name done"; }
RATES=${BIGRATES:-240,270,300} arm bigpre --engine-option aligner_graph_clips=64 --engine-option aligner_graph_chunks=256 --engine-option aligner_prefill_attention=true
[ $(el) -lt 260 ] && BX=" " RATES=300,330 arm none  # no word times, the same server build, for the card at hand
[ $(el) -lt 330 ] && ab nopack --batches 54 $BIG --prefill-attention --no-pack-windows
[ $(el) -lt 340 ] && ab nopre --batches 54 $BIG
save; t end

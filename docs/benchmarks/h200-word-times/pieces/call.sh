#!/usr/bin/env bash
# Prepared device call (issue 28): a sentence's words aligned in pieces while it is made (aligner_group_ms, the
# default) against aligned whole (aligner_group_ms=0), idle first audio and closed loop, with the aligner's counters;
# and the captured encoder (aligner_encoder_graphs, off until measured): its gpu test and its time against eager.
# The full-size synthetic aligner's head keeps its first 16 classes and its decoder is sharpened
# (write_synthetic_aligner's head_classes, sharpen): every time under 1.28 s of a clip and the times varying along
# the prompt, so a 1-s piece keeps some words as a trained aligner's would (plain random weights put every word at
# one time, mostly past a clip's end, where no piece keeps a word). Its times mean nothing; the calls, holds and
# releases are the real ones. The same comparison on the CPU is in docs/aligner.md ("The cost, plainly"). Run from the repository root on the H200 with the usual carry (.whl, .gpu_shared, .tcache);
# ~7 minutes.
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
STAGES=none bash tests/qwen3tts/gpu_loop.sh > /dev/null 2>&1
export PYTHONPATH=/tmp/site-gw:/tmp/vx TRITON_CACHE_DIR=/tmp/tcache VOXGATE_SHARED=$PWD/.gpu_shared VOXGATE_WORKLOADS=$PWD/.gpu_shared/workloads
python3 -c "from voxgate.engine.aligner.synthetic import write_synthetic_aligner as w; w('/tmp/aligner-near', tiny=False, head_classes=16, sharpen=True)"
timeout 200 python3 -m pytest tests/aligner/test_encoder_graphs.py tests/aligner/test_batch.py -k "cuda" -c /dev/null --confcutdir=tests -p no:cacheprovider -q -W ignore::pytest.PytestUnknownMarkWarning 2>&1 | tail -3
for enc in eager captured; do
  timeout 120 python3 -m voxgate.engine.aligner.bench --checkpoint /tmp/aligner-near --batches 1,8,32 --seconds 1 --dtype bf16 --encoder $enc --json $OUT/aligner-bench-1s-$enc.json 2>&1 | tail -4
done
VX="python3 -m voxgate.gateway.cli"
serve() { name=$1; shift; t "serve $name ($*)"
  $VX serve --config qwen3tts --engine-option model=/tmp/ck17 --engine-option aligner=/tmp/aligner-near --port 8012 "$@" > $OUT/server-$name.log 2>&1 &
  SERVER=$!
  for _ in $(seq 150); do python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:8012/health')" 2>/dev/null && break; sleep 1; done
  t "serving"; }
stop() { python3 -c "import urllib.request as u; print(u.urlopen('http://127.0.0.1:8012/metrics').read().decode())" | grep aligner > $OUT/metrics-$1.txt 2>/dev/null
  kill $SERVER; wait $SERVER 2>/dev/null; }
bench() { name=$1; shift
  timeout ${BS:-90} $VX bench run --url http://127.0.0.1:8012 --transport ws --frame-ms 1280 --seeds 1 --warmup 3 --drain 8 \
    --no-plots --out $OUT/$name --name h200-$name "$@" 2>&1 | grep -E "closed s|open s" | sed "s/^/$name: /"; }
idle() { bench $1-idle --concurrency "" --rates 1 --duration 12 "${@:2}"; }
closed() { bench $1-closed --concurrency 1,8,32 --closed-warmup 3 --closed-duration 10 --rates "" "${@:2}"; }
serve pieces --engine-option aligner_encoder_graphs=true
idle pieces --timestamps; closed pieces --timestamps; stop pieces
serve whole --engine-option aligner_encoder_graphs=true --engine-option aligner_group_ms=0
idle whole --timestamps; stop whole
t end; cd $OUT && tar czf reports.tgz *-idle *-closed server-*.log && rm -rf *-idle *-closed server-*.log; ls $OUT

#!/usr/bin/env bash
# 2026-12-04 late, device call 1 (its third part): the first clause (word_times_first_clause_words = 4) on texts with and without a clause
# comma, same server, budget_factor = 1 (random weights run each segment to its frame budget)
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
[ -d /tmp/ck17 ] || STAGES=none bash tests/qwen3tts/gpu_loop.sh > /dev/null 2>&1
export PYTHONPATH=/tmp/site-gw:/tmp/vx TRITON_CACHE_DIR=/tmp/tcache VOXGATE_SHARED=$PWD/.gpu_shared VOXGATE_WORKLOADS=$PWD/.gpu_shared/workloads
# clause.txt / noclause.txt: the first 40 Harvard sentences that have no comma, after "Early on that cold morning,"
# and after the same words without the comma
WORKLOADS=/tmp
python3 -c "
import sys
lines = [l.strip() for l in sys.stdin if l.strip() and ',' not in l][:40]
for name, lead in (('clause', 'Early on that cold morning, '), ('noclause', 'Early on that cold morning ')):
    open(f'/tmp/{name}.txt', 'w').write(''.join(lead + l[0].lower() + l[1:] + chr(10) for l in lines))" \
  < "$VOXGATE_WORKLOADS/harvard-sentences.txt"
timeout 40 python3 -m voxgate.engine.aligner.bench --checkpoint /tmp/aligner-full --write-synthetic full --batches 1 --seconds 1 --dtype bf16 > /dev/null 2>&1
{ echo 'word_times_first_clause_words = 4'; cat configs/qwen3tts.toml; } > /tmp/clause.toml
VX="python3 -m voxgate.gateway.cli"; t serve
$VX serve --config /tmp/clause.toml --engine-option model=/tmp/ck17 --engine-option aligner=/tmp/aligner-full \
  --engine-option aligner_graphs=true --engine-option budget_factor=1 --port 8012 > $OUT/server.log 2>&1 &
for _ in $(seq 90); do python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:8012/health')" 2>/dev/null && break; sleep 1; done
t serving
for w in clause noclause; do
  timeout 40 $VX bench run --url http://127.0.0.1:8012 --transport ws --frame-ms 1280 --seeds 1 --warmup 2 --drain 5 \
    --no-plots --out /tmp/r5/$w --name h200-$w --concurrency "" --rates 1 --duration 10 --timestamps \
    --workload $WORKLOADS/$w.txt 2>&1 | grep -E "open" | sed "s/^/$w: /"
  t "$w done"
done
tar -czf $OUT/r5.tar.gz -C /tmp/r5 . 2>/dev/null; gzip $OUT/server.log

#!/usr/bin/env bash
# 2026-12-06 call 2 (fired on call 1's warm machine): issue 28's report points with the aligner as call 1 set it
# up (graphs for 64 clips and 256 chunks, packed windows, prefill attention): its time per second of audio at 1 and
# 128 clips of 3 s (bench), and in the loop at 1 and 128 streams (closed loop, word times not held; the aligner's
# busy seconds over its audio seconds and over the speech made, from /metrics before and after), beside the same
# runs without word times; idle first audio both ways.
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
el() { echo $(( $(date +%s) - T0 )); }
[ -d /tmp/ck17 ] && [ -d /tmp/site-gw ] || STAGES=none bash tests/qwen3tts/gpu_loop.sh 2>&1 | tail -3
export PYTHONPATH=/tmp/site-gw:/tmp/vx TRITON_CACHE_DIR=/tmp/tcache VOXGATE_SHARED=$PWD/.gpu_shared VOXGATE_WORKLOADS=$PWD/.gpu_shared/workloads PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p /tmp/r2; save() { tar czf $OUT/reports2.tgz -C /tmp/r2 . ; }
[ -d /tmp/aligner-near ] || python3 -c "from voxgate.engine.aligner.synthetic import write_synthetic_aligner as w; w('/tmp/aligner-near', tiny=False, head_classes=16, sharpen=True)"
NEW="--graph-clips 64 --graph-chunks 256 --prefill-attention"
timeout 90 python3 -m voxgate.engine.aligner.bench --checkpoint /tmp/aligner-near --dtype bf16 --encoder captured --decoder-graphs \
  --seconds 3 --batches 1,128 $NEW --json /tmp/r2/bench-3s.json > /tmp/r2/bench-3s.txt 2>&1; head -4 /tmp/r2/bench-3s.txt; t bench; save
VX="python3 -m voxgate.gateway.cli"
$VX serve --config qwen3tts --engine-option model=/tmp/ck17 --engine-option aligner=/tmp/aligner-near --port 8012 \
  --engine-option aligner_graph_clips=64 --engine-option aligner_graph_chunks=256 --engine-option aligner_prefill_attention=true > /tmp/r2/server.log 2>&1 &
SERVER=$!
for _ in $(seq 200); do python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:8012/health')" 2>/dev/null && break; sleep 1; done
t serving
scrape() { python3 -c "import urllib.request as u; print(u.urlopen('http://127.0.0.1:8012/metrics').read().decode())" | grep -E "^voxgate_engine_(aligner_busy_seconds_total|aligner_audio_seconds_total|frames_total)" > /tmp/r2/metrics-$1.txt; }
share() { python3 - "$1" "$2" <<'PY'
import sys
def read(n):
    return {l.split()[0]: float(l.split()[1]) for l in open(f"/tmp/r2/metrics-{n}.txt")}
a, b = read(sys.argv[1]), read(sys.argv[2])
d = {k: b[k] - a.get(k, 0.0) for k in b}
busy, audio, made = (d.get(f"voxgate_engine_{k}", 0.0) for k in ("aligner_busy_seconds_total", "aligner_audio_seconds_total", "frames_total"))
made *= 0.08
print(f"aligner: {busy:.2f} s busy for {audio:.1f} s aligned of {made:.1f} s made: {1000 * busy / max(audio, 1e-9):.3f} ms per aligned s, "
      f"{1000 * busy / max(made, 1e-9):.3f} ms per s of speech, {audio / max(made, 1e-9):.2f} s aligned per s of speech")
PY
}
run() { name=$1; shift
  timeout ${BS:-90} $VX bench run --url http://127.0.0.1:8012 --transport ws --frame-ms 1280 --seeds 1 --warmup 3 --drain 8 \
    --no-plots --out /tmp/r2/$name --name gpu-$name "$@" 2>&1 | grep -E "closed s|open s" | sed "s/^/$name: /"; save; }
NOHOLD="--timestamps --timestamps-hold false"
run none-idle --concurrency "" --rates 1 --duration 12
scrape a; run nohold-idle --concurrency "" --rates 1 --duration 12 $NOHOLD; scrape b; share a b
t closed
run none-c1 --concurrency 1 --closed-warmup 3 --closed-duration 10 --rates ""
scrape c; run nohold-c1 --concurrency 1 --closed-warmup 3 --closed-duration 10 --rates "" $NOHOLD; scrape d; share c d
run none-c128 --concurrency 128 --closed-warmup 3 --closed-duration 10 --rates "" --client-procs 8
scrape e; run nohold-c128 --concurrency 128 --closed-warmup 3 --closed-duration 10 --rates "" --client-procs 8 $NOHOLD; scrape f; share e f
kill $SERVER; wait $SERVER 2>/dev/null; save; t end

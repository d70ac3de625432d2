#!/usr/bin/env bash
# The forced aligner's GPU work (issue 28's capacity bound) in one device call, from the repo root, carrying `.whl`,
# `.gpu_shared` and `.tcache` as tests/qwen3tts/gpu_loop.sh does (docs/gpu-notes.md):
#   run(command="bash tests/aligner/gpu_aligner.sh", carry=[".whl", ".gpu_shared", ".tcache", ".baseline"])
# Stages (STAGES, comma-separated; default tests,bench,slo):
#   tests  the aligner's `gpu` tests (packed decoder, prefill attention, captured decoder and encoder, conv_chunks,
#          the worker's stream priority),
#          the prefill kernel's and qk_norm_rope's (both launch shapes), then `python -m voxgate.kernels.bench
#          prefill_attention` (against slot_attention)
#   bench  the aligner bench, profiled kernel by kernel, on clips like the engine loop's (BENCH_SECONDS, 0.5-3.5 s;
#          its calls averaged 54 clips of 1.9 s at 240 req/s), at BENCH_BATCHES: the baseline tree carried as
#          .baseline/<commit>.tar.gz (`git archive <commit> engine kernels gateway web configs | gzip`) with BASE_BENCH,
#          then this tree with NEW_BENCH (the engine's defaults), then its buckets as powers of two (--graph-steps 1)
#   slo    sentence SLO capacity with word times not held (RATES) on a server with NEW_SERVE, then without word
#          times (BASE_RATES; none: skipped) on the same server: the baseline on the card at hand; then, with
#          DEFAULTS_ARM=1 and time left, not held on a server with the engine's defaults (DEFAULTS_RATES, none: no
#          rates; then closed c = 128), from the baseline tree with DEFAULTS_TREE=base (BASE: its archive, default the first)
#   report issue 28's report points: the aligner's time per second of audio at 1 and 128 clips of 3 s (bench, before
#          any server starts) and in the loop at 1 and 128 streams (closed loop, word times not held: its busy
#          seconds over the seconds it aligned and over the speech made, from /metrics before and after), beside the
#          same runs without word times, and idle first audio both ways; on the slo stage's server when both run
#          (BENCH3S=0 skips the bench)
# Stages stop starting once ELAPSED_CAP seconds have passed (default 480), so the call ends inside its limit.
# Everything comes back as $OUT/aligner.tar.gz, rewritten after each step, and Triton's cache at the end.
set -o pipefail
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
el() { echo $(( $(date +%s) - T0 )); }
room() { [ "$(el)" -lt "${ELAPSED_CAP:-480}" ]; }
STAGES=${STAGES:-tests,bench,slo}
has() { case ",$STAGES," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
OUT=${OUT:-/tmp/out}; R=/tmp/aligner-results; mkdir -p "$OUT" "$R"
save() { tar czf "$OUT/aligner.tar.gz" -C "$R" .; }

# the wheels, voxgate as a namespace and the TTS checkpoint (only the server stages need it)
if has slo || has report; then STAGES=none bash tests/qwen3tts/gpu_loop.sh 2>&1 | tail -2
else SKIP_CKPT=1 STAGES=none bash tests/qwen3tts/gpu_loop.sh 2>&1 | tail -2; fi
export PYTHONPATH=/tmp/site-gw:/tmp/vx TRITON_CACHE_DIR=/tmp/tcache VOXGATE_SHARED=$PWD/.gpu_shared \
  VOXGATE_WORKLOADS=$PWD/.gpu_shared/workloads PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$R/device.txt"
ALIGNER=/tmp/aligner-near  # full-size synthetic aligner whose times land inside a clip (docs/aligner.md)
[ -d $ALIGNER ] || python3 -c "from voxgate.engine.aligner.synthetic import write_synthetic_aligner as w
w('$ALIGNER', tiny=False, head_classes=16, sharpen=True)" &
WRITER=$!

if has tests; then
  timeout 120 python3 -m pytest tests/kernel/test_prefill_attention.py tests/aligner/test_batch.py \
    tests/aligner/test_encoder_graphs.py tests/aligner/test_conv_chunks.py tests/aligner/test_worker.py \
    -k "cuda or prefill or highest_priority" -c /dev/null --confcutdir=tests -p no:cacheprovider \
    -q -rs -W ignore::pytest.PytestUnknownMarkWarning 2>&1 | tail -6 | tee "$R/pytest.txt"
  timeout 60 python3 -m pytest tests/kernel/test_qk_norm_rope.py -c /dev/null --confcutdir=tests -p no:cacheprovider \
    -q -rs -W ignore::pytest.PytestUnknownMarkWarning 2>&1 | tail -3 | tee -a "$R/pytest.txt"
  timeout 40 python3 -m voxgate.kernels.bench prefill_attention 2>&1 | tail -3 | tee "$R/kernel-bench.txt"
  t tests; save
fi
wait $WRITER

# the baseline tree, unpacked as the `voxgate` namespace under /tmp/base (BASE: which archive, default the first)
BASE=${BASE:-$(ls .baseline/*.tar.gz 2>/dev/null | head -1)}
if [ -n "$BASE" ]; then
  mkdir -p /tmp/base/voxgate && tar xzf "$BASE" -C /tmp/base/voxgate
  ln -sfn /tmp/base/voxgate/gateway/sdk /tmp/base/voxgate/client  # as pyproject maps them
  ln -sfn /tmp/base/voxgate/gateway/integrations /tmp/base/voxgate/integrations
fi

NEW_BENCH=${NEW_BENCH:---prefill-attention}  # with the engine's defaults for the rest
NEW_SERVE=${NEW_SERVE:-}  # the engine's defaults
AB="python3 -m voxgate.engine.aligner.bench --checkpoint $ALIGNER --dtype bf16 --encoder captured --decoder-graphs \
  --warmup 1 --runs 3"
ab() { name=$1; shift; room || return
  timeout 100 $AB --json "$R/bench-$name.json" "$@" > "$R/bench-$name.txt" 2>&1
  grep -v "^\s*$" "$R/bench-$name.txt" | grep -v -i warn | head -8 | sed "s/^/$name: /"; t "bench $name"; save; }
if has bench; then
  S=${BENCH_SECONDS:-0.5-3.5}; B=${BENCH_BATCHES:-1,32,54,64}
  # the baseline: an older tree's engine (.baseline/<commit>.tar.gz, `git archive <commit> engine kernels ...`)
  # with its best settings, on the same GPU in the same call
  if [ -n "$BASE" ]; then
    # shellcheck disable=SC2086
    PYTHONPATH=/tmp/site-gw:/tmp/base ab "base-$(basename "$BASE" .tar.gz)" --seconds $S --batches $B --profile \
      ${BASE_BENCH:---graph-clips 64 --graph-chunks 256 --prefill-attention}
  fi
  # shellcheck disable=SC2086
  ab new --seconds $S --batches $B --profile $NEW_BENCH
  # shellcheck disable=SC2086
  ab steps1 --seconds $S --batches 54 --graph-steps 1 $NEW_BENCH
fi

VX="python3 -m voxgate.gateway.cli"
serve() { name=$1; shift
  # shellcheck disable=SC2086
  $VX serve --config qwen3tts --engine-option model=/tmp/ck17 --engine-option aligner=$ALIGNER --port 8012 "$@" \
    > "$R/server-$name.log" 2>&1 &
  SERVER=$!
  for _ in $(seq 200); do
    kill -0 $SERVER 2>/dev/null || { tail -5 "$R/server-$name.log"; return 1; }
    python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:8012/health')" 2>/dev/null && break; sleep 1
  done
  t "$name serving"; }
stop() { kill $SERVER; wait $SERVER 2>/dev/null; save; }
scrape() { python3 -c "import urllib.request as u; print(u.urlopen('http://127.0.0.1:8012/metrics').read().decode())" \
  | grep -E "^voxgate_(engine_aligner|engine_frames|admission_refusals)" > "$R/metrics-$1.txt"; }
share() { python3 - "$R" "$1" "$2" <<'PY'
import sys
root, a, b = sys.argv[1:]
def read(n):
    return {line.split()[0]: float(line.split()[1]) for line in open(f"{root}/metrics-{n}.txt")}
before, after = read(a), read(b)
d = {k: after[k] - before.get(k, 0.0) for k in after}
busy, aligned, frames = (d.get(f"voxgate_engine_{k}", 0.0)
                         for k in ("aligner_busy_seconds_total", "aligner_audio_seconds_total", "frames_total"))
made = frames * 0.08
print(f"aligner: {busy:.2f} s busy, {aligned:.1f} s aligned of {made:.1f} s made: "
      f"{1000 * busy / max(aligned, 1e-9):.3f} ms per aligned s, {1000 * busy / max(made, 1e-9):.3f} ms per s of "
      f"speech, {aligned / max(made, 1e-9):.2f} s aligned per s of speech")
parts = {p: d.get(f'voxgate_engine_aligner_part_seconds_total{{part="{p}"}}', 0.0) for p in ("resample", "prepare", "queue", "gpu_wait", "post")}
print("aligner busy by part: " + ", ".join(f"{p} {v:.2f} s ({100 * v / max(busy, 1e-9):.0f} %)" for p, v in parts.items()))
host = sum(v for p, v in parts.items() if p in ("resample", "prepare", "queue"))
cpu = d.get("voxgate_engine_aligner_host_cpu_seconds_total", 0.0)
print(f"aligner host: {host:.2f} s, its thread's CPU {cpu:.2f} s ({100 * cpu / max(host, 1e-9):.0f} %): the rest waited")
PY
}
load() { name=$1; shift; room || return
  timeout ${BS:-120} $VX bench run --url http://127.0.0.1:8012 --transport ws --frame-ms 1280 --seeds 1 --warmup 3 \
    --drain 8 --no-plots --out "$R/$name" --name "gpu-$name" "$@" 2>&1 | grep -E "closed s|open s|capacity" \
    | sed "s/^/$name: /"; save; }
NOHOLD="--timestamps --timestamps-hold false"
OPEN="--concurrency '' --duration 10 --client-procs 8"

CLOSED="--closed-warmup 3 --closed-duration 10 --rates ''"
want() { [ -z "${REPORT:-}" ] || case " $REPORT " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
report_loads() {  # issue 28's report points, on the server that is up (REPORT="name ...": only those)
  want none-idle && BS=60 load none-idle --concurrency "" --rates 1 --duration 12
  want nohold-idle && { scrape i0; BS=60 load nohold-idle --concurrency "" --rates 1 --duration 12 $NOHOLD; scrape i1
    share i0 i1; }
  want none-c1 && eval load none-c1 --concurrency 1 $CLOSED
  want nohold-c1 && { scrape c0; eval load nohold-c1 --concurrency 1 $CLOSED $NOHOLD; scrape c1; share c0 c1; }
  want none-c128 && eval load none-c128 --concurrency 128 --client-procs 8 $CLOSED
  want nohold-c128 && { scrape d0; eval load nohold-c128 --concurrency 128 --client-procs 8 $CLOSED $NOHOLD
    scrape d1; share d0 d1; }
  return 0
}

if has report && [ "${BENCH3S:-1}" = 1 ] && room; then  # the bench first, with the GPU to itself
  # shellcheck disable=SC2086
  timeout 90 $AB --seconds 3 --batches 1,128 $NEW_BENCH --json "$R/bench-3s.json" > "$R/bench-3s.txt" 2>&1
  head -4 "$R/bench-3s.txt"; save
fi

if has slo && room; then
  # shellcheck disable=SC2086
  if serve new $NEW_SERVE; then
    scrape slo0; eval load nohold-cap $OPEN --rates ${RATES:-270,300,330} $NOHOLD; scrape slo1; share slo0 slo1
    [ "${BASE_RATES:-}" != none ] && eval load none-cap $OPEN --rates ${BASE_RATES:-330,360,390}
    if has report && room; then report_loads; fi  # the same server: no second start (~100 s)
    stop
  fi
  # the engine's defaults, where NEW_SERVE names others; DEFAULTS_TREE=base: the baseline tree's server (any change)
  DT=/tmp/vx; [ "${DEFAULTS_TREE:-}" = base ] && [ -n "$BASE" ] && DT=/tmp/base
  echo "defaults arm: $DT ${BASE:-}" > "$R/defaults-tree.txt"
  if [ "${DEFAULTS_ARM:-0}" = 1 ] && room && PYTHONPATH=/tmp/site-gw:$DT serve defaults; then
    if [ "${DEFAULTS_RATES:-}" != none ]; then
      scrape e0; eval load nohold-cap-defaults $OPEN --rates ${DEFAULTS_RATES:-${RATES:-270,300,330}} $NOHOLD
      scrape e1; share e0 e1
    fi
    scrape e1
    eval load nohold-c128-defaults --concurrency 128 --client-procs 8 $CLOSED $NOHOLD; scrape e2; share e1 e2
    stop
  fi
elif has report && room; then
  # shellcheck disable=SC2086
  if serve report $NEW_SERVE; then report_loads; stop; fi
fi
save
# Triton's cache for the next call (gpu_loop.sh's own save ran before any server tuned a kernel)
OUT=$OUT bash tests/qwen3tts/save_triton_cache.sh | tail -1
t end

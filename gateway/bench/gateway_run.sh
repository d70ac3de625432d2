#!/usr/bin/env bash
# The gateway-only benchmark on the GPU host (no GPU needed: the fake engine), one device call, from the repo root:
#   VOXGATE_COMMIT=$(git rev-parse HEAD) bash gateway/bench/gateway_run.sh
# Carry `.whl` (the gateway's wheels, as for gpu_run.sh). About 4.5 minutes with the defaults below. Writes under
# $OUT: each run's report.md, the soak JSONs, summary.txt (one line per run) and uptime/nproc. Runs, all PCM/Opus
# asap at c = 128 with long frames unless said (docs/benchmarks.md, "The gateway alone"):
#   pcm-long          the acceptance: >= 4,000 audio-s/s, server loop lag p99 < 5 ms (defaults: loop_chunk_turns 4,
#                     gc_gen0_threshold 5,000)
#   pcm-long-kN       the same with loop_chunk_turns = N for N in $TURNS_ALT (0: no bound): what the bound costs in
#                     throughput and gains in lag (on the 2-core machine 4 cost ~10 % against no bound)
#   pcm-long-cap      the engine capped at $CAP audio-s/s in all (a shared device, as a GPU is): the gateway with
#                     headroom, its lag p99
#   opus-pool/inline  Opus with 8 encoder threads and on the event loop (the issue wants >= 1.6x)
#   soak-256          256 client_clock listeners, 20 ms frames, $PROCS client processes: no pause over 10 ms
#   soak-1000         1,000 asap sessions, 20 ms frames: no lost or garbled frame
# Shorter for a dry run: DUR=3 WARM=1 SOAK_S=4 RAMP=1 LISTENERS=16 SESSIONS=40 PROCS=2 PY=.venv/bin/python.
# Some runs only: ONLY="opus-pool opus-inline" (names as above; soak-256 and soak-1000 by their prefix "soak").
set -o pipefail
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
OUT=${OUT:-/tmp/out}
PY=${PY:-python3}
DUR=${DUR:-20} WARM=${WARM:-5} SOAK_S=${SOAK_S:-20} RAMP=${RAMP:-5} CAP=${CAP:-4200} TURNS_ALT=${TURNS_ALT:-0 8}
LISTENERS=${LISTENERS:-256} SESSIONS=${SESSIONS:-1000} PROCS=${PROCS:-12}
mkdir -p "$OUT" /tmp/vx/voxgate /tmp/runs /tmp/gwcfg
for d in gateway engine kernels web configs; do ln -sfn "$PWD/$d" "/tmp/vx/voxgate/$d"; done
ln -sfn "$PWD/gateway/sdk" /tmp/vx/voxgate/client; ln -sfn "$PWD/gateway/integrations" /tmp/vx/voxgate/integrations  # as pyproject maps them
mkdir -p /tmp/whl-gw
for w in .whl/*.whl; do
  [ -e "$w" ] || continue
  case "$(basename "$w")" in transformers-*|tokenizers-*|huggingface_hub-*|qwen_tts-*) ;; *) cp "$w" /tmp/whl-gw/ ;; esac
done
ls /tmp/whl-gw/*.whl >/dev/null 2>&1 && $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
  --upgrade --target /tmp/site-gw /tmp/whl-gw/*.whl
export PYTHONPATH=/tmp/site-gw:/tmp/vx
VX="$PY -m voxgate.gateway.cli"
{ echo "commit ${VOXGATE_COMMIT:-unknown}; $(getconf _NPROCESSORS_ONLN) CPUs; DUR=$DUR CAP=$CAP LISTENERS=$LISTENERS SESSIONS=$SESSIONS"
  echo "PROCS=$PROCS"; } > "$OUT/summary.txt"
# The GPU host has no libopus: carry Debian's as .whl/libopus.so.0 (cp /usr/lib/x86_64-linux-gnu/libopus.so.0 .whl/).
# ctypes finds it on LD_LIBRARY_PATH (through `ld`), or in the system directory where this user may write.
if ! $PY -c "import opuslib" 2>/dev/null && [ -f .whl/libopus.so.0 ]; then
  mkdir -p /tmp/libopus && cp .whl/libopus.so.0 /tmp/libopus/ && ln -sf libopus.so.0 /tmp/libopus/libopus.so
  export LD_LIBRARY_PATH=/tmp/libopus${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  $PY -c "import opuslib" 2>/dev/null || { cp .whl/libopus.so.0 /usr/lib/x86_64-linux-gnu/ && ldconfig; } 2>/dev/null
fi
$PY -c "import opuslib" 2>/dev/null || echo "opus: libopus not found (carry .whl/libopus.so.0): the opus runs will be refused" \
  | tee -a "$OUT/summary.txt"

config() {  # name, a sed script for gateway-bench.toml's lines, top-level keys to put before them
  local file=/tmp/gwcfg/$1.toml script=$2; shift 2
  { printf '%s\n' "$@"; grep -v '^#' configs/gateway-bench.toml | sed "$script"; } > "$file"
  echo "$file"
}

wanted() { [ -z "${ONLY:-}" ] || case " $ONLY " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

bench() {  # name, config, more arguments: one line in summary.txt
  local name=$1 cfg=$2; shift 2
  wanted "$name" || return 0
  local load; load=$(cut -d' ' -f1-3 /proc/loadavg)
  timeout $((DUR + WARM + 90)) $VX bench run --engine fake --serve-arg=--config --serve-arg="$cfg" --concurrency 128 \
    --closed-warmup "$WARM" --closed-duration "$DUR" --rates '' --no-plots --name "$name" --out "/tmp/runs/$name" \
    "$@" > "/tmp/runs/$name.log" 2>&1 || echo "$name: bench failed (rc $?): $(tail -3 "/tmp/runs/$name.log")" \
    | tee -a "$OUT/summary.txt"
  local report=/tmp/runs/$name/report.md
  [ -f "$report" ] || return
  cp "$report" "$OUT/$name.md"
  awk -F'|' -v name="$name" -v load="$load" '
    /^\| sentences / { gsub(/ /, "", $5); gsub(/ /, "", $11); tp = $5; pauses = $8 }
    /event_loop_lag/ { gsub(/ /, "", $7); gsub(/ /, "", $8); lag = $7 "/" $8 }
    /gc_pause_seconds/ { g = $4; gsub(/ |generation=/, "", g); gsub(/ /, "", $5); gsub(/ /, "", $6);
                         gc = gc " gc" g ":" $5 "x" $6 "ms" }
    END { printf "%-16s audio-s/s %s | server loop lag p50/p99 %s ms |%s | pauses %s | load %s\n",
          name, tp, lag, gc, pauses, load }' "$report" | tee -a "$OUT/summary.txt"
}

soak() {  # name, sessions, pacing
  local name=$1 sessions=$2 pacing=$3
  timeout $((SOAK_S + RAMP + 120)) $VX bench soak --url http://127.0.0.1:8765 --sessions "$sessions" --pacing "$pacing" \
    --frame-ms 20 --duration "$SOAK_S" --ramp "$RAMP" --processes "$PROCS" --out "$OUT/$name.json" \
    > "/tmp/runs/$name.log" 2>&1 || echo "$name: soak failed (rc $?): $(tail -3 "/tmp/runs/$name.log")" \
    | tee -a "$OUT/summary.txt"
  [ -f "$OUT/$name.json" ] && $PY -c "import json, sys; d = json.load(open(sys.argv[1])); d.pop('plan', None); \
d.pop('error_examples', None); print(sys.argv[2] + ':', ', '.join(f'{k} {round(v, 1) if isinstance(v, float) else v}' \
for k, v in d.items()))" "$OUT/$name.json" "$name" | tee -a "$OUT/summary.txt"
}

bench pcm-long gateway-bench --frame-ms 1280
for k in $TURNS_ALT; do bench "pcm-long-k$k" "$(config "k$k" '' "loop_chunk_turns = $k")" --frame-ms 1280; done
bench pcm-long-cap "$(config cap "s/^device_rtf = .*/device_rtf = $CAP/; s/^shared_device = .*/shared_device = true/")" \
  --frame-ms 1280
bench opus-pool "$(config opus-pool '' 'opus_threads = 8')" --frame-ms 1280 --codec opus
bench opus-inline "$(config opus-inline '' 'opus_threads = 0')" --frame-ms 1280 --codec opus
if wanted soak; then
  $VX serve --config gateway-bench --port 8765 --log-level warning > /tmp/runs/soak-server.log 2>&1 &
  SERVER=$!
  for _ in $(seq 100); do $PY -c "import urllib.request as u; u.urlopen('http://127.0.0.1:8765/health')" 2>/dev/null \
    && break; sleep 0.1; done
  soak soak-$LISTENERS-client_clock "$LISTENERS" client_clock
  soak soak-$SESSIONS-asap "$SESSIONS" asap
  kill "$SERVER"
  wait "$SERVER" 2>/dev/null
fi
$PY - "$OUT/summary.txt" <<'EOF'
import re, sys
text = open(sys.argv[1]).read()
rate = {m[0]: float(m[1]) for m in re.findall(r"^(opus-\w+)\s+audio-s/s ([\d.]+)", text, re.M)}
if len(rate) == 2 and rate["opus-inline"]:
    line = f"opus pool / inline: {rate['opus-pool'] / rate['opus-inline']:.2f}x (wanted >= 1.6)"
    print(line)
    open(sys.argv[1], "a").write(line + "\n")
EOF
# Everything but the summary in one archive: a device call brings back only a few files.
mkdir -p /tmp/gw-out && mv "$OUT"/*.md "$OUT"/*.json "$OUT"/*.log /tmp/gw-out/ 2>/dev/null; cp /tmp/runs/*.log /tmp/gw-out/ 2>/dev/null
tar -czf "$OUT/gateway_run.tar.gz" -C /tmp/gw-out .
true

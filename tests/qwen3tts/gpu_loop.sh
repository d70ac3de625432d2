#!/usr/bin/env bash
# The engine loop (issue 12) in one device call on the H200, from the repo root, carrying `.whl` (wheels, see
# docs/benchmarks.md), `.gpu_shared` (a copy of ../shared) and `.tcache` (Triton's cache from an earlier call,
# optional: it saves the codec kernels' compile and tuning):
#   run(command="STAGES=tests,steps,suite bash tests/qwen3tts/gpu_loop.sh", carry=[".whl", ".gpu_shared", ".tcache"])
# Stages (STAGES, comma-separated): tests (the `gpu` loop tests at real shapes), steps (`voxgate bench steps`: every
# captured bucket timed), suite (`voxgate bench gpu-suite --profile $PROFILE` through the gateway, default loop),
# gateway (the gateway alone on the fake engine at 1,000x real time, closed loop c=128, long PCM frames),
# schedules (the chunk schedules of SCHEDULES, each on its own server: closed c=1 and c=32, open 1 req/s),
# variants (engine-option A/B, VARIANTS="name:option=value[&option=value] ...", each on its own server: closed
# c=32 and c=128, open 1 req/s for VARIANT_DUR s), textrate (`voxgate bench textrate` on the model: text streamed at $WPS words/s
# beside sentence mode), opus (gateway/bench/gateway_run.sh's Opus encoder pool against inline, fake engine), voice (uploaded voices'
# first audio on a 1.7B Base checkpoint it writes: tests/qwen3tts/gpu_voice_ttfa.py), ttsbench (tts-bench's five
# HTTP targets and its WebSocket mode with their defaults: tests/qwen3tts/gpu_ttsbench.py). SKIP_CKPT=1: no CustomVoice
# checkpoint (stages that do not use it). admission (issue 26 on one --config qwen3tts server: idle first audio
# over WebSocket and HTTP, sentence capacity and 2x overload over the WebSocket, tts-bench's shape and 2x over HTTP).
# Everything comes back as $OUT/results.tar.gz (rewritten after each stage), and Triton's cache in parts of 15 MB
# as $OUT/triton.tar.gz.part-* (cat them into .tcache/triton.tar.gz for the next call).
# ADM_PROCS / ADM_HTTP_PROCS: client processes of the WebSocket / HTTP overload runs (8 / 12: with 4, each client's
# own event loop lagged enough to double the refusals' measured p99; docs/benchmarks/h200-admission).
# ADM_RUNS picks the admission stage's runs: idle-ws idle-http sentences-ws ttsbench-http (default), closed (closed
# loop at ADM_C), passages-ws (open loop on passages at ADM_PASSAGE_RATES); ADM_SERVE_ARGS / ADM_TAG: a second
# server's options and the suffix of its reports.
# stepvariants: `voxgate bench steps` per STEP_VARIANTS entry (name:option=value[&option=value]), into
# steps-<name>/ of the results (STEPS_ARGS shared by all; the depth loop's other forms only with STEPV_DEPTH, e.g.
# fused,layers,persistent: they compile for a minute or more on a cold cache).
# ADM_SERVER_ENV: environment for the admission stage's server only, e.g. PYTHONPATH with a sitecustomize.py that
# calls gc.set_debug(gc.DEBUG_STATS) (every collection's generation sizes, unreachable objects and time in its log).
set -o pipefail
export PYTHONUNBUFFERED=1 VOXGATE_SHARED=$PWD/.gpu_shared VOXGATE_WORKLOADS=$PWD/.gpu_shared/workloads
OUT=${OUT:-/tmp/out}; RES=/tmp/res; mkdir -p "$OUT" "$RES"
STAGES=${STAGES:-tests,steps,suite}; PROFILE=${PROFILE:-loop}; CKPT=${CKPT:-/tmp/ck17}
T0=$(date +%s); log() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a "$RES/gpu_loop.log"; }
has() { case ",$STAGES," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }

# voxgate from this tree as the `voxgate` namespace; the gateway's wheels apart from the reference's
mkdir -p /tmp/vx/voxgate /tmp/whl-gw
for d in engine gateway kernels web configs; do ln -sfn "$PWD/$d" "/tmp/vx/voxgate/$d"; done
ln -sfn "$PWD/gateway/sdk" /tmp/vx/voxgate/client; ln -sfn "$PWD/gateway/integrations" /tmp/vx/voxgate/integrations  # as pyproject maps them
for w in .whl/*.whl; do
  case "$(basename "$w")" in transformers-*|tokenizers-*|huggingface_hub-*|qwen_tts-*) ;; *) cp "$w" /tmp/whl-gw/ ;; esac
done
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site-gw \
  /tmp/whl-gw/*.whl || exit 1
export PYTHONPATH=/tmp/site-gw:/tmp/vx
export TRITON_CACHE_DIR=/tmp/tcache; mkdir -p "$TRITON_CACHE_DIR"
[ -f .tcache/triton.tar.gz ] && tar -xzf .tcache/triton.tar.gz -C "$TRITON_CACHE_DIR" && log "triton cache restored"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee -a "$RES/gpu_loop.log"
python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__,
'transformers', transformers.__version__)" | tee -a "$RES/gpu_loop.log"

if [ "${SKIP_CKPT:-0}" != 1 ]; then
  log "checkpoint"
  python3 tests/qwen3tts/gpu_bench.py write --out "$CKPT" --json "$RES/write.json" 2>&1 | tail -2
fi

if has tests; then
  log "gpu tests"
  # every test's outcome on a line of its own (pytest-all.log): a run cut by the timeout still names its failures
  VOXGATE_GPU_CKPT=$CKPT VOXGATE_GPU_RESULTS=$RES timeout ${TESTS_S:-240} python3 -m pytest ${TESTS:-tests/qwen3tts/test_gpu_loop.py} \
    -k "${TESTS_K:-}" -c /dev/null --confcutdir=tests -p no:cacheprovider -v -rfs \
    -W ignore::pytest.PytestUnknownMarkWarning \
    2>&1 | tee "$RES/pytest-all.log" | grep -E "FAILED|ERROR|passed|failed|skipped|^E " | tail -25 | tee "$RES/pytest.log"
fi
if has steps; then
  log "bench steps"
  timeout ${STEPS_S:-330} python3 -m voxgate.gateway.cli bench steps --checkpoint "$CKPT" --out "$RES/steps" \
    ${STEPS_ARGS:-} 2>&1 | grep -v "it/s\]" | tail -60 | tee "$RES/steps.log"
fi
save() { tar -czf "$OUT/results.tar.gz" -C "$RES" .; }
if has stepvariants; then
  # STEP_VARIANTS="name:option=value[&option=value] ...": `voxgate bench steps` once per variant (one process each,
  # STEPS_ARGS shared, STEPV_S seconds each, the first 60 more), each decode bucket's line printed
  limit=$(( ${STEPV_S:-150} + 60 ))  # the first run also reads the checkpoint cold and compiles
  for variant in ${STEP_VARIANTS:-}; do
    name=${variant%%:*}; IFS='&' read -ra options <<< "${variant#*:}"
    log "steps $name (${options[*]})"
    timeout $limit python3 -m voxgate.gateway.cli bench steps --checkpoint "$CKPT" --out "$RES/steps-$name" \
      --depth-variants "${STEPV_DEPTH:-none}" ${STEPS_ARGS:-} "${options[@]/#/--engine-option=}" 2>&1 \
      | grep -E "^\| [0-9]+ \| 0 \||rror" | head -8
    limit=${STEPV_S:-150}
    save
  done
fi
save_cache() {  # only entries of this tree's sources (the carry back is limited: prune_triton_cache.py)
  OUT=$OUT bash tests/qwen3tts/save_triton_cache.sh | tee -a "$RES/gpu_loop.log" && log "triton cache saved"
}
save_cache; save
if has suite; then
  log "gpu-suite $PROFILE"
  timeout ${SUITE_S:-400} python3 -m voxgate.gateway.cli bench gpu-suite --profile "$PROFILE" --out "$RES/suite" \
    --checkpoint "$CKPT" --budget-s ${BUDGET:-330} --skip-baseline ${SUITE_ARGS:-} 2>&1 \
    | grep -v "pad_token_id\|it/s\]" | tail -40
  save_cache; save
fi
if has gateway; then
  log "gateway alone (fake engine, 1000x)"
  timeout ${GATEWAY_S:-150} python3 -m voxgate.gateway.cli bench run --engine fake --serve-arg=--config \
    --serve-arg=gateway-bench --concurrency 128 --closed-warmup 5 --closed-duration 20 --frame-ms 1280 --no-plots \
    --out "$RES/gateway" --name h200-gateway-pcm-long ${GATEWAY_ARGS:-} 2>&1 | grep -E "closed s|lag" | tail -5
  save
fi
if has schedules; then
  for sched in ${SCHEDULES:-4,8,16 1,3,8,16}; do
    log "chunk schedule $sched"
    timeout ${SCHED_S:-80} python3 -m voxgate.gateway.cli bench run --engine qwen3tts --engine-option "model=$CKPT" \
      --engine-option "chunk_frames=$sched" --concurrency 1,32 --closed-warmup 3 --closed-duration 10 --rates 1 \
      --seeds 1 --warmup 3 --duration 10 --drain 15 --no-plots --out "$RES/schedule-${sched//,/-}" \
      --name "h200-schedule-${sched//,/-}" 2>&1 | grep -E "closed s|open s" | tail -4
    save
  done
fi
if has variants; then
  for variant in ${VARIANTS:-}; do
    name=${variant%%:*}; IFS='&' read -ra options <<< "${variant#*:}"
    log "variant $name (${options[*]})"
    timeout ${VARIANT_S:-150} python3 -m voxgate.gateway.cli bench run --engine qwen3tts --engine-option "model=$CKPT" \
      "${options[@]/#/--engine-option=}" --concurrency ${VARIANT_C:-32,128} --closed-warmup 3 --closed-duration 10 --rates "${VARIANT_RATES-1}" \
      --seeds 1 --warmup 3 --duration ${VARIANT_DUR:-10} --drain 15 --frame-ms 1280 --no-plots --out "$RES/variant-$name" \
      --name "h200-variant-$name" 2>&1 | grep -E "closed s|open s" | tail -4
    save
  done
  save_cache
fi
if has textrate; then
  log "textrate"
  timeout ${TEXTRATE_S:-200} python3 -m voxgate.gateway.cli bench textrate --engine qwen3tts --config qwen3tts \
    --engine-option "model=$CKPT" --wps ${WPS:-4,8,16,32,80} --sessions ${TEXTRATE_SESSIONS:-4} --texts 2 \
    --out "$RES/textrate" 2>&1 | grep -v "^{" | tail -12
  save
fi
if has opus; then
  log "opus pool against inline"
  OUT=$RES/opus ONLY="opus-pool opus-inline" DUR=${OPUS_DUR:-12} WARM=3 bash gateway/bench/gateway_run.sh 2>&1 | tail -4
  save
fi
if has voice; then
  log "uploaded voices' first audio (1.7B Base)"
  python3 -c "from pathlib import Path; from voxgate.engine.qwen3tts.tools.synthetic import write_synthetic
write_synthetic('Qwen3-TTS-12Hz-1.7B-Base', '/tmp/ckb17', device='cuda', shared=Path('$VOXGATE_SHARED'))"
  timeout ${VOICE_S:-150} python3 tests/qwen3tts/gpu_voice_ttfa.py --checkpoint /tmp/ckb17 --out "$RES/voice_ttfa.json" \
    2>&1 | grep -v "it/s\]\|graph/s\|tensor/s" | tail -6
  save
fi
if has ttsbench; then
  log "tts-bench's requests with its defaults (tests/qwen3tts/gpu_ttsbench.py)"
  python3 -m voxgate.gateway.cli serve --config qwen3tts --engine-option "model=$CKPT" --port 8011 \
    > "$RES/ttsbench-server.log" 2>&1 &
  SERVER=$!
  for _ in $(seq 300); do python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:8011/health')" 2>/dev/null && break; sleep 1; done
  for rate in ${TTSBENCH_RATES:-2 20}; do
    timeout ${TTSBENCH_S:-120} python3 tests/qwen3tts/gpu_ttsbench.py --url http://127.0.0.1:8011 --n ${TTSBENCH_N:-30} \
      --rate "$rate" --out "$RES/ttsbench-rate$rate.json" 2>&1 | tail -8
  done
  kill $SERVER; wait $SERVER 2>/dev/null
  save
fi
if has admission; then
  # Issue 26 on one server (configs/qwen3tts.toml: admission by deadline): idle first audio at 1 req/s over both doors
  # (WebSocket contexts carry their first-audio stages), then sentence capacity and 2x overload over the WebSocket,
  # then tts-bench's shape over HTTP (no length rule) and its 2x overload.
  log "admission: serve"
  env ${ADM_SERVER_ENV:-} python3 -m voxgate.gateway.cli serve --config qwen3tts --engine-option "model=$CKPT" --port 8012 ${ADM_SERVE_ARGS:-} \
    > "$RES/admission-server${ADM_TAG:-}.log" 2>&1 &
  SERVER=$!
  for _ in $(seq 400); do python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:8012/health')" 2>/dev/null && break; sleep 1; done
  log "admission: serving"; save_cache
  bench() { name=$1; shift; log "admission: $name"
    timeout ${ADM_S:-150} python3 -m voxgate.gateway.cli bench run --url http://127.0.0.1:8012 --concurrency "" \
      --seeds 1 --warmup 3 --drain 20 --no-plots --out "$RES/adm-$name" --name "h200-$name" "$@" 2>&1 \
      | grep -E "open s|closed s|capacity|overload|timeline" | tail -8; save; }
  runs=" ${ADM_RUNS:-idle-ws idle-http sentences-ws ttsbench-http} "
  [[ $runs == *" idle-ws "* ]] && bench idle-ws --transport ws --frame-ms 1280 --rates 1 --duration ${IDLE_S:-40}
  [[ $runs == *" idle-http "* ]] && bench idle-http --transport http --rates 1 --duration ${IDLE_S:-40}
  [[ $runs == *" closed "* ]] && bench closed${ADM_TAG:-} --transport ws --frame-ms 1280 --concurrency ${ADM_C:-1,8} \
    --closed-warmup 3 --closed-duration 12
  [[ $runs == *" sentences-ws "* ]] && bench sentences-ws --transport ws --frame-ms 1280 \
    --rates ${ADM_WS_RATES:-240,280} --duration 15 --overload 2 --client-procs ${ADM_PROCS:-8}
  [[ $runs == *" passages-ws "* ]] && bench passages-ws${ADM_TAG:-} --transport ws --frame-ms 1280 --workload passages \
    --rates ${ADM_PASSAGE_RATES:-48} --duration ${ADM_PASSAGE_S:-15} --client-procs ${ADM_PROCS:-8}
  [[ $runs == *" ttsbench-http "* ]] && bench ttsbench-http --transport http --no-length-rule \
    --rates ${ADM_HTTP_RATES:-80,100} --duration 15 --overload 2 --client-procs ${ADM_HTTP_PROCS:-12}
  curl -s http://127.0.0.1:8012/metrics > "$RES/admission-metrics${ADM_TAG:-}.txt" 2>/dev/null \
    || python3 -c "import urllib.request as u; print(u.urlopen('http://127.0.0.1:8012/metrics').read().decode())" > "$RES/admission-metrics${ADM_TAG:-}.txt"
  kill $SERVER; wait $SERVER 2>/dev/null
  save
fi
log "done"
save; ls -la "$OUT"

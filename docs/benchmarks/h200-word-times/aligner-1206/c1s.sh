#!/usr/bin/env bash
# 2026-12-06 call 1, short (the device budget left after many failed starts): the new aligner paths' GPU tests, the
# prefill kernel against the per-token one, and the aligner bench on 54 clips of 0.5-3.5 s (the loop's calls) as
# main ran it against the three changes (graphs for 64 clips / 256 chunks, packed windows, prefill attention).
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
SKIP_CKPT=1 STAGES=none bash tests/qwen3tts/gpu_loop.sh 2>&1 | tail -2
export PYTHONPATH=/tmp/site-gw:/tmp/vx TRITON_CACHE_DIR=/tmp/tcache VOXGATE_SHARED=$PWD/.gpu_shared PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p /tmp/r; save() { tar czf $OUT/reports.tgz -C /tmp/r . ; }
python3 -c "from voxgate.engine.aligner.synthetic import write_synthetic_aligner as w; w('/tmp/aligner-near', tiny=False, head_classes=16, sharpen=True)" &
W=$!
timeout 80 python3 -m pytest tests/kernel/test_prefill_attention.py tests/aligner/test_batch.py tests/aligner/test_encoder_graphs.py \
  -k "cuda or prefill" -c /dev/null --confcutdir=tests -p no:cacheprovider -q -rs -W ignore::pytest.PytestUnknownMarkWarning 2>&1 | tail -4 | tee /tmp/r/pytest.txt
t tests; save
timeout 25 python3 -m voxgate.kernels.bench prefill_attention 2>&1 | tail -2 | tee /tmp/r/kernel-bench.txt
wait $W; t written
AB="python3 -m voxgate.engine.aligner.bench --checkpoint /tmp/aligner-near --dtype bf16 --encoder captured --decoder-graphs --seconds 0.5-3.5 --profile --warmup 1 --runs 3 --batches 54"
ab() { name=$1; shift; timeout 70 $AB --json /tmp/r/bench-$name.json "$@" > /tmp/r/bench-$name.txt 2>&1; cat /tmp/r/bench-$name.txt | grep -v "^\s*$" | head -12 | sed "s/^/$name: /"; t "bench $name"; save; }
ab main --no-pack-windows
ab new --graph-clips 64 --graph-chunks 256 --prefill-attention
ab nopre --graph-clips 64 --graph-chunks 256
t end

#!/usr/bin/env bash
# session 1204b call 2: the aligner's cuda tests; the depth-pass sweep; closed-loop variants c=1,8,128
T0=$(date +%s)
STAGES=none bash tests/qwen3tts/gpu_loop.sh > /dev/null 2>&1
export PYTHONPATH=/tmp/site-gw:/tmp/vx TRITON_CACHE_DIR=/tmp/tcache VOXGATE_SHARED=$PWD/.gpu_shared VOXGATE_WORKLOADS=$PWD/.gpu_shared/workloads
echo "[$(( $(date +%s) - T0 )) s] aligner cuda tests"
timeout 100 python3 -m pytest tests/aligner/test_batch.py -k "cuda" -c /dev/null --confcutdir=tests -p no:cacheprovider -q -rs -W ignore::pytest.PytestUnknownMarkWarning 2>&1 | tail -6 | tee $OUT/aligner-tests.txt
echo "[$(( $(date +%s) - T0 )) s] sweep"
timeout 80 python3 .gpu_shared/dp_sweep.py > $OUT/sweep.txt 2>&1; cat $OUT/sweep.txt | grep -v "^    compiled" | cut -c1-160
echo "[$(( $(date +%s) - T0 )) s] variants"
STAGES=variants SKIP_CKPT=1 VARIANT_C=1,8,128 VARIANT_RATES="" VARIANT_S=110 \
  VARIANTS="fill:codec_fill=true p0:pipeline_min_rows=0 mp8:max_prefills=8" bash tests/qwen3tts/gpu_loop.sh 2>&1 | grep -E "variant|closed s"
echo "[$(( $(date +%s) - T0 )) s] end"
rm -f $OUT/triton.tar.gz*; ls -la $OUT

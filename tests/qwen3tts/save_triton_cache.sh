#!/usr/bin/env bash
# Triton's cache ($TRITON_CACHE_DIR) into $OUT as triton.tar.gz.part-* (15 MB parts: a call brings back no file over
# 16 MB), only the entries of this tree's sources (prune_triton_cache.py): `bash tests/gpu_carry.sh DIR` joins the
# parts into .tcache/triton.tar.gz for the next call. Used by gpu_loop.sh and tests/aligner/gpu_aligner.sh.
python3 tests/qwen3tts/prune_triton_cache.py "$TRITON_CACHE_DIR" --prefix /tmp/vx/voxgate/
rm -f "$OUT"/triton.tar.gz*
tar -c -C "$TRITON_CACHE_DIR" . | gzip -9 | split -b 15M - "$OUT/triton.tar.gz.part-"

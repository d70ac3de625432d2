#!/usr/bin/env bash
# Ran in the seventeenth session on branch exp/lanes-one-store at c99a729 (gemv_lanes_rows and gemv_talker_lanes exist
# only there); outputs in call4/, results in ../README.md ("The lanes kernel at 8 rows, one store a launch").
# Prepared in the sixteenth and seventeenth sessions (2026-12-07), on branch exp/lanes-one-store: the lanes kernel at
# 2-16 rows in its second form (every row's sums gathered in their own layout and stored once: one barrier a launch,
# where the first form's store a row made 8-16), for the code predictor (gemv_lanes_rows) and the Talker's q|k|v and
# o (gemv_talker_lanes), against the defaults (lanes at one row only), on one machine:
#   run(command="bash docs/benchmarks/h200-step-profile/lanes-1207p/call4.sh", carry=[".whl", ".gpu_shared", ".tcache"])
# 1. GPU tests: the lanes kernel at the real shapes, every row count (both dtypes, PDL bits), and teacher-forced fp32
#    through the graphs with gemv_lanes_rows = gemv_talker_rows = gemv_talker_lanes = 16
# 2. chains (rows_chain.py), predictor at 1 / 8 / 16 rows, Talker at 1 / 8: cuBLAS, engine, lanes (every row count),
#    lanes with at most 4 (and 2) columns a program: the Talker's one-row q|k|v and gate|up read slower through 8
#    (9.45 / 20.37 against the tiles kernel's 8.65 / 19.86 us, whose programs take 4 columns of K 2,048)
# 3. the step at 1 / 8 / 16 rows (+ 64 prompt tokens): default, lanes8 (the predictor's 2-8 rows), lanes8t (and the
#    Talker's q|k|v and o at 2-8 rows)
# The gateway is left to the next call (GATEWAY=1 adds it: ~4 min more than one call's 10).
# Expected (from call 2's chains and the compiled code): the first form cost ~0.5 us a row past the first (q|k|v
# 5.67 -> 9.33 us at 8 rows); without a barrier a row, ~0.1-0.2 us: a predictor layer at 8 rows ~21 us against the
# rows kernel's 24.0 (split-K), -0.2 ms off the 8-row step (4.14 ms on an H100), if the registers the gathered sums
# take (o at 8 rows: 138 under Triton 3.6, 178 under 3.9) leave enough programs an SM. The Talker's q|k|v and o at 8
# rows: cuBLAS 10.1 and 8.0 us; through lanes ~7 and ~5 (the predictor's one-row rates per byte): ~0.15 ms a step.
TESTS_S=${TESTS_S:-140} STEPV_S=${STEPV_S:-60} GATEWAY=${GATEWAY:-0} \
  PREDICTOR_ARMS="cuBLAS,engine,lanes,lanes cols 4" TALKER_ARMS="cuBLAS,engine,lanes,lanes cols 4,lanes cols 2" \
  STEP_VARIANTS="default: lanes8:gemv_lanes_rows=8 lanes8t:gemv_lanes_rows=8&gemv_talker_lanes=8" \
  bash "$(dirname "$0")/call.sh"

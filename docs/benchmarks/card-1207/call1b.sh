#!/usr/bin/env bash
# session 1207 (fifteenth) call 1b, the call that ran: call1.sh with a kernel timeline of the c = 8 phase (one call
# had to do for all), so shorter limits. CUDA events around 250 steps from the 5,000th (TL_START; inside the c = 8
# phase: c = 1 makes ~3,800 in its 13 s).
#   run(command="bash docs/benchmarks/card-1207/call1b.sh", carry=[".whl", ".gpu_shared", ".tcache"])
TESTS_S=${TESTS_S:-100} CARD_S=${CARD_S:-170} PASS_DRAIN=${PASS_DRAIN:-35} \
  CARD_OPTIONS="gpu_timeline=/tmp/res/tl8:${TL_START:-5000}:250" exec bash docs/benchmarks/card-1207/call1.sh

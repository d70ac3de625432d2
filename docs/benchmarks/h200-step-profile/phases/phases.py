"""Each phase of the persistent depth pass alone (with all 24 barriers): the record of a run on the H200
(`python phases.py` with voxgate importable and CUDA present; its output: phases.txt). It launches
`_depth_pass_kernel` directly at the 1.7B predictor's shapes with a `phases` mask of one phase (31: all five; 0: the
barriers alone), with and without the L2 prefetch, each shape first compiled and checked co-resident (a grid
barrier over programs that cannot all run would hang), then timed with Triton's do_bench_cudagraph. A phase alone
computes on inputs no earlier phase wrote, so its `max err` is meaningless except at 31."""

import sys
from pathlib import Path

# the launcher, its co-residency check and its output line: launch_shapes.py's (the record of the launch shapes)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "prefetch"))
from launch_shapes import main

# warps, programs per SM, tile columns (q|k|v, o and down, gate|up), K tile, prefetch, stages, phases
SHAPES = [(4, 1, 32, 16, 32, 128, True, 3, phases) for phases in (0, 1, 2, 4, 8, 16, 31)]
SHAPES += [(4, 1, 32, 16, 32, 128, False, 3, phases) for phases in (1, 4, 8, 16, 31)]

if __name__ == "__main__":
    main(SHAPES)

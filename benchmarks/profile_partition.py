"""Run one benchmark shape with one launch config a few times, for a profiler (ncu).

    ncu --clock-control none -k regex:_pa_v2 --launch-skip 2 --launch-count 2 \\
        --section SpeedOfLight --section Occupancy --section WarpStateStats \\
        python3 benchmarks/profile_partition.py --shape 1x100K/32-8/128 --config 64,2,1,1,0,1

--shape names a bench_paged_attention.SHAPES entry (or its index); --config is a
LaunchConfig as comma-separated integers (tile, warps, stages, early V, prefetch, k3d);
omitted = the tables' choice.
"""

from __future__ import annotations

import argparse

import torch
from bench_common import SHAPES, entry, make  # run as `python benchmarks/...`

from vllm_codemod.kernels import launch_tables


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="0", help=f"one of {list(SHAPES)} or its index")
    ap.add_argument("--config", default=None)
    ap.add_argument("--calls", type=int, default=3)
    opts = ap.parse_args()
    name = list(SHAPES)[int(opts.shape)] if opts.shape.isdigit() else opts.shape
    if name not in SHAPES:
        ap.error(f"unknown shape {opts.shape!r}; known: {list(SHAPES)}")
    if opts.config:
        values = [int(v) for v in opts.config.split(",")]
        launch_tables.set_config_override(launch_tables.LaunchConfig(*values))
    fn = entry(make(*SHAPES[name]))
    for _ in range(opts.calls):
        fn()
    torch.cuda.synchronize()
    print(f"shape {name} config {opts.config or 'default'}: ok")


if __name__ == "__main__":
    main()

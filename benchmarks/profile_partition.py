"""Run one benchmark shape with one launch config a few times, for a profiler (ncu).

    ncu --clock-control none -k regex:_pa_v2 --launch-skip 2 --launch-count 2 \\
        --section SpeedOfLight --section Occupancy --section WarpStateStats \\
        python3 benchmarks/profile_partition.py --shape 0 --config 16,1,1,0,1,0

--shape indexes bench_paged_attention.SHAPES; --config is a LaunchConfig as comma-separated
integers (tile, warps, stages, early V, split, prefetch); omitted = the default choice.
"""

from __future__ import annotations

import argparse

import torch
from bench_paged_attention import SHAPES, make  # this directory: run as `python benchmarks/...`

from vllm_codemod.kernels import dispatch, triton_impl


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", type=int, default=0)
    ap.add_argument("--config", default=None)
    ap.add_argument("--calls", type=int, default=3)
    opts = ap.parse_args()
    if opts.config:
        triton_impl.set_config_override(tuple(int(v) for v in opts.config.split(",")))
    a = make(SHAPES[opts.shape])
    for _ in range(opts.calls):
        dispatch.paged_attention_v2_with_path(**a, backend="triton")
    torch.cuda.synchronize()
    print(f"shape {SHAPES[opts.shape]} config {opts.config or 'default'}: ok")


if __name__ == "__main__":
    main()

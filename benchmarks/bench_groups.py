"""Large GQA groups and MQA (32-64 query heads per kv head) on a CUDA device (not a test).

bench_paged_attention.py's shapes have 4-8 query heads per kv head.  Models with one kv
head for 32-71 query heads (MQA: StarCoder, Falcon-7B) or large groups give the partition
kernel 32-64 rows per program, where the configs tuned at 16 rows spill registers
(ptxas); the launch tables give 64-row programs four-warp configs (docs/kernel-notes.md,
runs v18-v19).  This times the tables' choice against explicit configs at such shapes,
timed like bench_paged_attention.py (20-call CUDA graph, two input sets alternating),
with the copy bandwidth measured in the same run; a config whose output differs from the
default's by > 1e-2 is reported as wrong.  --no-k3d times the tables older Triton gets
(2-D K loads) instead.

    python benchmarks/bench_groups.py [--no-k3d] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import bench_common as bpa  # this directory: run as `python benchmarks/...`
import torch

from vllm_codemod.kernels.launch_tables import LaunchConfig

# name: (sequence lengths, q heads, kv heads, head size); programs = seqs x kv x partitions
SHAPES = {
    "32x16K/32-1/128": ([16_384] * 32, 32, 1, 128),  # 32 rows, 1024 programs
    "64x8K/48-1/128": ([8_192] * 64, 48, 1, 128),  # 48 rows padded to 64, 1024 programs
    "128x16K/64-1/128": ([16_384] * 128, 64, 1, 128),  # 64 rows, 4096 programs
    "1x100K/64-1/128": ([100_000], 64, 1, 128),  # 64 rows, 196 programs
}
CONFIGS = [
    LaunchConfig(64, 2, 1, True, 0, True),
    LaunchConfig(32, 1, 1, True, 1, True),
    LaunchConfig(32, 2, 1, True, 0, True),
    LaunchConfig(32, 4, 1, True, 0, True),
    LaunchConfig(32, 4, 1, True, 1, True),
    LaunchConfig(16, 4, 1, True, 0, True),
    LaunchConfig(64, 4, 1, True, 0, True),
]


def measure(name, bw, configs):
    """The tables' config and ``configs`` at one shape: chain us per config."""
    lens, nh, nkv, hs = SHAPES[name]
    a, b = bpa.make(lens, nh, nkv, hs, seed=0), bpa.make(lens, nh, nkv, hs, seed=1)
    kv_bytes = 2 * sum(lens) * nkv * hs * a["key_cache"].element_size()
    fa, fb = bpa.entry(a), bpa.entry(b)
    plan = bpa.plan_of(fa, lens)  # runs the call: the tables' config, and its output
    ref = a["out"].clone()
    default, programs = plan["config"], plan["programs"]
    row = dict(default=list(default), programs=programs, default_us=bpa.chain_us([fa, fb]))
    pct = 100 * kv_bytes / (row["default_us"] * 1e-6) / bw
    print(f"{name} default {tuple(default)}: {row['default_us']:.1f} us ({pct:.1f}%)", flush=True)
    row["variants"] = {
        str(tuple(cfg)): bpa.time_config(cfg, a, fa, fb, ref, kv_bytes, bw) for cfg in configs
    }
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument(
        "--no-k3d", action="store_true", help="time the pre-Triton-3 tables (2-D K loads)"
    )
    opts = ap.parse_args()
    configs = CONFIGS
    if opts.no_k3d:
        from vllm_codemod.kernels import decode_launch

        decode_launch.HAS_PERMUTE = False
        configs = [c._replace(k3d=False) for c in CONFIGS]
        configs += [LaunchConfig(16, 1, 2, True), LaunchConfig(16, 1, 1, False)]
    bw = bpa.copy_bandwidth()
    print(f"copy bandwidth (read+write): {bw / 1e9:.0f} GB/s")
    rows = {}
    for name in SHAPES:
        rows[name] = measure(name, bw, configs)
        torch.cuda.empty_cache()
    if opts.json:
        Path(opts.json).write_text(json.dumps(dict(copy_GBps=bw / 1e9, shapes=rows), indent=1))


if __name__ == "__main__":
    main()

"""Large GQA groups and MQA (32-64 query heads per kv head) on a CUDA device (not a test).

bench_paged_attention.py's shapes all have 4-8 query heads per kv head.  Models with one kv
head for 32-71 query heads (MQA: StarCoder, Falcon-7B) or large groups give the partition
kernel 32-64 rows per program, where the launch configs tuned at 16 rows spill registers
(ptxas); pick_config gives 64-row programs four-warp configs (docs/kernel-notes.md, runs
v18-v19).  This times the default choice against explicit configs at such shapes,
CUDA-graph timed like bench_paged_attention.py, with the copy bandwidth measured in the
same run; a config whose output differs from the default's by > 1e-2 is reported NaN.
--no-k3d times the tables older Triton gets (2-D K loads) instead.

    python benchmarks/bench_groups.py [--no-k3d] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import bench_paged_attention as bpa  # this directory: run as `python benchmarks/...`
import torch

from vllm_codemod.kernels import dispatch, triton_impl

# (num_seqs, q heads, kv heads, head size, tokens): programs = seqs * kv * ceil(tokens/512)
SHAPES = [
    (32, 32, 1, 128, 16_384),  # 32 rows, 1024 programs
    (64, 48, 1, 128, 8_192),  # 48 rows padded to 64, 1024 programs
    (128, 64, 1, 128, 16_384),  # 64 rows, 4096 programs
    (1, 64, 1, 128, 100_000),  # 64 rows, 196 programs
]
CONFIGS = [
    (64, 2, 1, True, 1, 0, True),
    (32, 1, 1, True, 1, 1, True),
    (32, 2, 1, True, 1, 0, True),
    (32, 4, 1, True, 1, 0, True),
    (32, 4, 1, True, 1, 1, True),
    (16, 4, 1, True, 1, 0, True),
    (64, 4, 1, True, 1, 0, True),
]


def measure(shape, bw, configs):
    """The default config and ``configs`` at one shape: graph us per config."""
    seqs, nh, nkv, hs, tokens = shape
    a = bpa.make(shape)
    kv_bytes = 2 * seqs * tokens * nkv * hs * a["key_cache"].element_size()

    def tri():
        dispatch.paged_attention_v2_with_path(**a, backend="triton")

    tri()
    torch.cuda.synchronize()
    ref = a["out"].clone()
    programs, d_pad, g_pad = bpa._programs(shape)
    default = triton_impl.pick_config(programs, d_pad, torch.device("cuda"), g_pad)
    row = dict(shape=list(shape), default=list(default), default_us=bpa.graph_time(tri))
    row["variants"] = bpa.run_configs(configs, tri, a, ref)
    print(f"{shape} default {tuple(default)}: {row['default_us']:.1f} us", flush=True)
    for cfg, t in row["variants"].items():
        if isinstance(t, float) and t == t:
            t = f"{t:8.1f} us ({100 * kv_bytes / (t * 1e-6) / bw:5.1f}%)"
        print(f"    {cfg:<34} {t}", flush=True)
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
        triton_impl.HAS_PERMUTE = False
        configs = [c[:6] + (False,) for c in CONFIGS] + [(16, 1, 2, True), (16, 1, 1, False)]
    bw, _ = bpa.copy_bandwidth()
    print(f"copy bandwidth (read+write): {bw / 1e9:.0f} GB/s")
    rows = []
    for shape in SHAPES:
        rows.append(measure(shape, bw, configs))
        torch.cuda.empty_cache()
    if opts.json:
        Path(opts.json).write_text(json.dumps(dict(copy_GBps=bw / 1e9, rows=rows), indent=1))


if __name__ == "__main__":
    main()

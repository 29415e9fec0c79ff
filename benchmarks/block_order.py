"""How much the block table's order costs the Triton path (a device experiment, not a test).

bench_paged_attention.py gives every sequence a random permutation of the cache's blocks,
so each 16-token block of K (and of V) of a kv head is a separate 4 KB run somewhere in a
cache of hundreds of MB.  This times the same shapes with the blocks in table order
(block i of a sequence at cache slot i: one long run per kv head, the best case for
DRAM), beside the random order, and a read-only bandwidth figure (a sum over 4 GiB; a
lower bound for what a pure read can reach), so the gap to the copy bandwidth can be
split into what the layout costs and what the kernel costs.

    python benchmarks/block_order.py [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import bench_common as bpa  # this directory: run as `python benchmarks/...`
import torch

SHAPES = ["1x100K/32-8/128", "1x100K/16-2/256"]


def read_bandwidth(nbytes=4 << 30, reps=30):
    """Bytes read per second by a sum over nbytes of bf16 (read once, nothing written)."""
    x = torch.empty(nbytes // 2, dtype=torch.bfloat16, device="cuda").uniform_()
    for _ in range(5):
        x.sum(dtype=torch.float32)
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        x.sum(dtype=torch.float32)
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    return nbytes / (statistics.median(times) * 1e-3)


def partition_kernel_us(fn, iters=10):
    """Device time of the partition kernel per call, from the PyTorch profiler."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    for evt in prof.key_averages():
        if "partition" in evt.key:
            total = getattr(evt, "device_time_total", None) or getattr(evt, "cuda_time_total", 0)
            return total / iters
    return None


def time_order(name, sequential):
    lens, nh, nkv, hs = bpa.SHAPES[name]
    a, b = bpa.make(lens, nh, nkv, hs, seed=0), bpa.make(lens, nh, nkv, hs, seed=1)
    if sequential:
        seqs, per_seq = a["block_tables"].shape
        order = torch.arange(seqs * per_seq, device="cuda", dtype=torch.int32)
        a["block_tables"] = order.view(seqs, per_seq)
        b["block_tables"] = a["block_tables"].clone()
    fa, fb = bpa.entry(a), bpa.entry(b)
    fa()
    torch.cuda.synchronize()
    return dict(
        one_us=bpa.one_call_graph_us(fa),
        chain_us=bpa.chain_us([fa, fb]),
        partition_kernel_us=partition_kernel_us(fa),
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    opts = ap.parse_args()
    copy_bw = bpa.copy_bandwidth()
    read_bw = read_bandwidth()
    print(
        f"copy bw (read+write) {copy_bw / 1e9:.0f} GB/s; read-only (sum) {read_bw / 1e9:.0f} GB/s"
    )
    rows = []
    for name in SHAPES:
        lens, nh, nkv, hs = bpa.SHAPES[name]
        kv_bytes = 2 * sum(lens) * nkv * hs * 2
        for sequential in (False, True):
            r = dict(shape=name, sequential=sequential, **time_order(name, sequential))
            rows.append(r)
            pct = {
                k: 100 * kv_bytes / (r[k] * 1e-6) / copy_bw
                for k in ("one_us", "chain_us", "partition_kernel_us")
                if r[k]
            }
            print(
                f"{name:<20} {'sequential' if sequential else 'random':<10} "
                + "  ".join(f"{k} {r[k]:7.1f} ({pct[k]:4.1f}% copy)" for k in pct),
                flush=True,
            )
            torch.cuda.empty_cache()
    if opts.json:
        Path(opts.json).write_text(
            json.dumps(dict(copy_GBps=copy_bw / 1e9, read_GBps=read_bw / 1e9, rows=rows))
        )


if __name__ == "__main__":
    main()

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

import bench_paged_attention as bpa  # this directory: run as `python benchmarks/...`
import torch

from vllm_codemod.kernels import dispatch

SHAPES = [bpa.SHAPES[0], bpa.SHAPES[4]]


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


def time_order(shape, sequential):
    a = bpa.make(shape)
    if sequential:
        seqs, per_seq = a["block_tables"].shape
        a["block_tables"] = torch.arange(seqs * per_seq, device="cuda", dtype=torch.int32).view(
            seqs, per_seq
        )
    b = bpa.make(shape, seed=1)
    if sequential:
        b["block_tables"] = a["block_tables"].clone()

    def tri():
        dispatch.paged_attention_v2_with_path(**a, backend="triton")

    def tri_b():
        dispatch.paged_attention_v2_with_path(**b, backend="triton")

    tri()
    torch.cuda.synchronize()
    kernels = bpa.kernel_times(tri)
    return dict(
        graph_us=bpa.graph_time(tri),
        chain_us=bpa.chain_time([tri, tri_b], 20),
        partition_kernel_us=next((v for k, v in kernels.items() if "partition" in k), None),
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    opts = ap.parse_args()
    copy_bw, _ = bpa.copy_bandwidth()
    read_bw = read_bandwidth()
    print(
        f"copy bw (read+write) {copy_bw / 1e9:.0f} GB/s; read-only (sum) {read_bw / 1e9:.0f} GB/s"
    )
    rows = []
    for shape in SHAPES:
        seqs, nh, nkv, hs, tokens = shape
        kv_bytes = 2 * seqs * tokens * nkv * hs * 2
        for sequential in (False, True):
            r = dict(shape=list(shape), sequential=sequential, **time_order(shape, sequential))
            rows.append(r)
            pct = {
                k: 100 * kv_bytes / (r[k] * 1e-6) / copy_bw
                for k in ("graph_us", "chain_us", "partition_kernel_us")
                if r[k]
            }
            print(
                f"{str(tuple(shape)):<26} {'sequential' if sequential else 'random':<10} "
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

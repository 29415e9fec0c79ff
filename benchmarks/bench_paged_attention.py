"""Benchmark the bundled PagedAttention V2 kernels on a CUDA device (never a unit test).

Per shape, in one process: the device-to-device copy bandwidth (bytes read + written)
measured first, then the Triton path through the entry point

* ``chain``: 20 calls captured in one CUDA graph, two input sets alternating, per call
  (vLLM captures a whole decode step in one graph, so this is the op's cost there: no
  launch gaps, and no call finds the previous call's K/V in L2);
* ``one``: a graph of one call (its whole launch latency charged to the op);
* a float64 check of the output (K/V gathered through the block table on the device);

and the K+V bytes (counted once) as a % of the copy bandwidth.  Times are medians of
``triton.testing.do_bench`` replays, in microseconds.

    python benchmarks/bench_paged_attention.py [--shapes NAME,...] [--variants] [--torch]
        [--json out.json]
    python benchmarks/bench_paged_attention.py --host [--json host.json]

--variants also times explicit launch configs per shape (``launch_tables.LaunchConfig``:
tile, warps, stages, early V, prefetch, k3d), forced through ``set_config_override``.
--host: the entry point's host cost, 1000 back-to-back eager calls of
``dispatch.paged_attention_v2(*vLLM's positional arguments)`` at one 1024-token sequence
(32/8 heads, head 128; one launch) and at 4096 tokens (two launches), with the
compiled-launcher fast path on and off: us per call to enqueue, and wall time to the last
kernel's end; beside the same process's floors (host_floors.py: a torch op, an empty
20-argument Triton kernel launched plainly and through its compiled handle).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch
from bench_common import (
    CHAIN,
    HOST_CALLS,
    SHAPES,
    bench,
    chain_us,
    copy_bandwidth,
    entry,
    environment,
    host_us,
    make,
    one_call_graph_us,
    plan_of,
    positional,
    reference64,
    rel,
    time_config,
)
from host_floors import floors

from vllm_codemod.kernels import decode_launch, dispatch
from vllm_codemod.kernels.launch_tables import LaunchConfig

# vLLM 0.8.5's CUDA paged_attention_v2 on an H200, measured elsewhere (eager us).
VLLM_US = {
    "1x100K/32-8/128": 367,
    "1x100K/16-2/256": 443,
    "1x32K/32-8/128": 149,
    "8x32K/32-8/128": 861,
    "64x4K/32-8/128": 860,
}
HOST_SHAPE = ([1024], 32, 8, 128)

# --variants: explicit configs, by padded head size (tile, warps, stages, early V, prefetch,
# k3d); the table's own choice is always timed too.
VARIANTS = {
    128: [
        LaunchConfig(64, 2, 1, True, 0, True),
        LaunchConfig(32, 1, 1, True, 1, True),
        LaunchConfig(32, 2, 1, True, 1, True),
        LaunchConfig(64, 4, 1, True, 0, True),
        LaunchConfig(16, 1, 1, False, 0, False),
        LaunchConfig(64, 2, 1, True, 0, False),
    ],
    256: [
        LaunchConfig(32, 4, 1, True, 1, True),
        LaunchConfig(32, 4, 1, True, 0, True),
        LaunchConfig(64, 8, 1, True, 0, True),
        LaunchConfig(32, 2, 1, True, 0, False),
    ],
}


def resources():
    """Registers, spills and shared memory of every compiled partition/reduce kernel."""
    found = {}
    for plan in decode_launch._plans.values():
        for kind in ("partition", "reduce"):
            kernel = getattr(plan, kind)
            k = None if kernel is None else kernel.compiled  # a fused plan has no reduce
            if k is None:
                continue
            label = f"{kind} {tuple(plan.config) if kind == 'partition' else ''} " + ",".join(
                f"{n}={v}" for n, v in kernel.constexprs.items()
            )
            found[label] = dict(
                regs=getattr(k, "n_regs", None),
                spills=getattr(k, "n_spills", None),
                shared=getattr(getattr(k, "metadata", None), "shared", None),
            )
    return found


def measure(name, bw, opts):
    lens, nh, nkv, hs = SHAPES[name]
    a, b = make(lens, nh, nkv, hs, seed=0), make(lens, nh, nkv, hs, seed=1)
    kv_bytes = 2 * sum(lens) * nkv * hs * a["key_cache"].element_size()
    d_pad = max(16, 1 << max(0, (hs - 1).bit_length()))
    fa, fb = entry(a), entry(b)
    row = dict(kv_bytes=kv_bytes, floor_us=kv_bytes / bw * 1e6, **plan_of(fa, lens))
    cfg = tuple(row["config"])
    a["out"].fill_(float("nan"))
    path = dispatch.paged_attention_v2_with_path(*positional(a))
    torch.cuda.synchronize()
    row["path"] = path
    row["err_f64"] = rel(a["out"], reference64(a))
    row["ok"] = bool(row["err_f64"] < 2e-2)
    row["chain_us"] = chain_us([fa, fb])
    row["one_us"] = one_call_graph_us(fa)
    for key in ("chain", "one"):
        row[f"{key}_pct_copy"] = 100 * kv_bytes / (row[f"{key}_us"] * 1e-6) / bw
    launch = f"{tuple(cfg)} chunk {row['chunk']}" + (" fused" if row["fused"] else "")
    launch += " balanced" if row.get("balanced") else ""
    print(
        f"{name:<20} {path:>6} {launch:<48} chain {row['chain_us']:7.1f} us "
        f"({row['chain_pct_copy']:5.1f}% of copy)  one {row['one_us']:7.1f} us "
        f"({row['one_pct_copy']:5.1f}%)  err {row['err_f64']:.1e}"
        + ("" if row["ok"] else "  WRONG")
        + (f"  vllm {VLLM_US[name]} us" if name in VLLM_US else ""),
        flush=True,
    )
    if opts.torch:
        row["torch_us"] = 1e3 * bench(
            lambda: dispatch.paged_attention_v2_with_path(**a, backend="torch"), 3, 20
        )
        row["torch_pct_copy"] = 100 * kv_bytes / (row["torch_us"] * 1e-6) / bw
        print(f"    torch path (eager) {row['torch_us']:.1f} us", flush=True)
    if opts.variants:
        ref = a["out"].clone()
        row["variants"] = {
            str(tuple(v)): time_config(v, a, fa, fb, ref, kv_bytes, bw)
            for v in VARIANTS.get(d_pad, [])
        }
    return row


def host_cost():
    """us per call of back-to-back eager entry-point calls, fast path on and off, at
    HOST_SHAPE (one launch) and at 4096 tokens (two launches), beside the same process's
    floors (host_floors.py): three rounds each, interleaved, medians."""
    fns = {}
    for tokens in (HOST_SHAPE[0][0], 4096):
        fns[tokens] = entry(make([tokens], *HOST_SHAPE[1:]))
    saved = decode_launch._fast["enabled"]
    runs = {}
    try:
        for _ in range(3):
            for tokens, fn in fns.items():
                for label, fast in (("entry_fast", saved), ("entry_plain", False)):
                    decode_launch._fast["enabled"] = fast
                    runs.setdefault(f"{label} {tokens}", []).append(host_us(fn, HOST_CALLS))
                decode_launch._fast["enabled"] = saved
            for label, row in floors(host_us, HOST_CALLS).items():
                runs.setdefault(label, []).append((row["enqueue_us"], row["wall_us"]))
    finally:
        decode_launch._fast["enabled"] = saved
    rows = {}
    for label, got in runs.items():
        enqueue = statistics.median(e for e, _ in got)
        wall = statistics.median(w for _, w in got)
        rows[label] = {"enqueue_us": enqueue, "wall_us": wall, "runs": got}
        print(
            f"host {label:<18} {enqueue:6.1f} us/call enqueue, {wall:6.1f} us/call wall "
            f"(median of {len(got)} x {HOST_CALLS})",
            flush=True,
        )
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default=None, help=f"comma-separated subset of {list(SHAPES)}")
    ap.add_argument("--variants", action="store_true", help="also time explicit configs")
    ap.add_argument("--torch", action="store_true", help="also time the PyTorch path (eager)")
    ap.add_argument("--host", action="store_true", help="host cost of eager calls, then exit")
    ap.add_argument("--json", default=None, help="write the results here")
    opts = ap.parse_args()
    results = environment()
    print(" ".join(f"{k} {v}" for k, v in results.items()), flush=True)
    if opts.host:
        results["host"] = host_cost()
    else:
        names = opts.shapes.split(",") if opts.shapes else list(SHAPES)
        unknown = [n for n in names if n not in SHAPES]
        if unknown:
            ap.error(f"unknown shape(s) {unknown}; known: {list(SHAPES)}")
        bw = copy_bandwidth()
        results["copy_GBps"] = bw / 1e9
        results["chain_calls"] = CHAIN
        print(f"copy bandwidth (read+write) {bw / 1e9:.0f} GB/s; K+V bytes counted once")
        results["shapes"] = {}
        for name in names:
            results["shapes"][name] = measure(name, bw, opts)
            torch.cuda.empty_cache()
            if opts.json:  # partial results survive a time limit
                Path(opts.json).write_text(json.dumps(results, indent=1, default=str))
        results["resources"] = resources()
        bad = [n for n, r in results["shapes"].items() if not r["ok"]]
        if bad:
            print(f"WRONG results (float64 check): {bad}")
    if opts.json:
        Path(opts.json).write_text(json.dumps(results, indent=1, default=str))
    shapes = results.get("shapes", {})
    return 1 if any(not r["ok"] for r in shapes.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())

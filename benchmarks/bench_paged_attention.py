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
import math
import statistics
import time
from pathlib import Path

import torch

from vllm_codemod.kernels import dispatch, launch_tables
from vllm_codemod.kernels.launch_tables import LaunchConfig
from vllm_codemod.kernels.signature import PARTITION_SIZE

BLOCK = 16
CHAIN = 20
RAGGED = [1, 15, 16, 17, 511, 512, 513, 1000, 4096, 8191, 16384, 20000, 32768, 777, 3, 12345]
# name: (sequence lengths, q heads, kv heads, head size)
SHAPES = {
    "1x100K/32-8/128": ([100_000], 32, 8, 128),
    "1x100K/16-2/256": ([100_000], 16, 2, 256),
    "1x100K/28-4/128": ([100_000], 28, 4, 128),
    "1x32K/32-8/128": ([32_768], 32, 8, 128),
    "ragged16/32-8/128": (RAGGED, 32, 8, 128),
    "8x32K/32-8/128": ([32_768] * 8, 32, 8, 128),
    "64x4K/32-8/128": ([4096] * 64, 32, 8, 128),
}
# vLLM 0.8.5's CUDA paged_attention_v2 on an H200, measured elsewhere (eager us).
VLLM_US = {
    "1x100K/32-8/128": 367,
    "1x100K/16-2/256": 443,
    "1x32K/32-8/128": 149,
    "8x32K/32-8/128": 861,
    "64x4K/32-8/128": 860,
}
HOST_SHAPE = ([1024], 32, 8, 128)
HOST_CALLS = 1000

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


def bench(fn, warmup=10, rep=100):
    import triton.testing

    try:
        return triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median")
    except TypeError:  # Triton 2.x: no return_mode
        return triton.testing.do_bench(fn, warmup=warmup, rep=rep, quantiles=[0.5])[0]


def copy_bandwidth(nbytes=4 << 30, reps=30):
    """Bytes read + written per second by a 4 GiB device-to-device copy (median)."""
    src = torch.empty(nbytes // 2, dtype=torch.float16, device="cuda").uniform_()
    dst = torch.empty_like(src)
    for _ in range(5):
        dst.copy_(src)
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        dst.copy_(src)
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    del src, dst
    torch.cuda.empty_cache()
    return 2 * nbytes / (statistics.median(times) * 1e-3)


def make(lens, nh, nkv, hs, dtype=torch.bfloat16, seed=0):
    """vLLM's decode inputs on the device: randomly permuted blocks, one table row each."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = 16 // torch.tensor([], dtype=dtype).element_size()
    per_seq = [math.ceil(n / BLOCK) for n in lens]
    nblocks = sum(per_seq)
    kc = torch.randn(nblocks, nkv, hs // x, BLOCK, x, device="cuda", dtype=dtype, generator=g)
    vc = torch.randn(nblocks, nkv, hs, BLOCK, device="cuda", dtype=dtype, generator=g)
    perm = torch.randperm(nblocks, device="cuda", generator=g).to(torch.int32)
    tables = torch.zeros(len(lens), max(per_seq), dtype=torch.int32, device="cuda")
    used = 0
    for s, nb in enumerate(per_seq):
        tables[s, :nb] = perm[used : used + nb]
        used += nb
    q = torch.randn(len(lens), nh, hs, device="cuda", dtype=dtype, generator=g)
    parts = math.ceil(max(lens) / PARTITION_SIZE)
    return dict(
        out=torch.empty_like(q),
        exp_sums=torch.empty(len(lens), nh, parts, device="cuda"),
        max_logits=torch.empty(len(lens), nh, parts, device="cuda"),
        tmp_out=torch.empty(len(lens), nh, parts, hs, device="cuda", dtype=dtype),
        query=q,
        key_cache=kc,
        value_cache=vc,
        num_kv_heads=nkv,
        scale=1.0 / math.sqrt(hs),
        block_tables=tables,
        seq_lens=torch.tensor(lens, dtype=torch.int32, device="cuda"),
        block_size=BLOCK,
        max_seq_len=max(lens),
        alibi_slopes=None,
    )


def positional(a):
    """vLLM >= 0.5's positional arguments (17: through k_scale, v_scale)."""
    names = ("out", "exp_sums", "max_logits", "tmp_out", "query", "key_cache", "value_cache")
    names += ("num_kv_heads", "scale", "block_tables", "seq_lens", "block_size", "max_seq_len")
    return tuple(a[n] for n in names) + (None, "auto", 1.0, 1.0)


def reference64(a):
    """float64 attention for every sequence, K/V gathered through the table on the device."""
    q = a["query"].double()
    nkv = a["num_kv_heads"]
    nh, hs = q.shape[1], q.shape[2]
    out = torch.empty_like(q)
    for s, n in enumerate(a["seq_lens"].tolist()):
        ids = a["block_tables"][s, : math.ceil(n / BLOCK)].long()
        k = a["key_cache"][ids].permute(1, 0, 3, 2, 4).reshape(nkv, -1, hs)[:, :n].double()
        v = a["value_cache"][ids].permute(1, 0, 3, 2).reshape(nkv, -1, hs)[:, :n].double()
        qs = q[s].view(nkv, nh // nkv, hs)
        att = torch.softmax(qs @ k.transpose(1, 2) * a["scale"], -1)
        out[s] = (att @ v).reshape(nh, hs)
    return out


def rel(x, y):
    return float((x.double() - y.double()).norm() / y.double().norm())


def _warm(fns):
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for fn in fns:
            fn()
            fn()
    torch.cuda.current_stream().wait_stream(stream)


def one_call_graph_us(fn):
    """A CUDA graph of one call, replayed: the op plus a whole graph launch."""
    _warm([fn])
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return bench(graph.replay) * 1e3


def chain_graph(fns, n=CHAIN):
    """n calls captured back to back in one CUDA graph, cycling through fns."""
    _warm(fns)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(n):
            fns[i % len(fns)]()
    return graph


def chain_us(fns, n=CHAIN):
    """Per call, n calls captured back to back in one graph, cycling through fns."""
    return bench(chain_graph(fns, n).replay, warmup=5, rep=80) * 1e3 / n


def entry(a):
    args = positional(a)
    return lambda: dispatch.paged_attention_v2(*args)


def item_tokens(plan, lens):
    """Tokens per program of ``plan`` for sequences of ``lens`` tokens: its chunk, or for
    a balanced plan the item length its kernels compute on the device from the lengths'
    total (``_balanced_chunk``; a stream pads each sequence to whole ALIGN units)."""
    k = plan.partition.constexprs
    if not plan.budget:
        return k["PART"]
    align = k["ALIGN"]
    total = sum(-(-n // align) * align for n in lens) if k.get("STREAM") else sum(lens)
    per = -(-total // plan.budget)
    return max(-(-per // align) * align, k["PART"])


def plan_of(call, lens):
    """What the entry point launched for this call: the plan decode_launch built for it
    (config as the tables or a tuning table picked it, the tokens per program, one or two
    launches, the grid)."""
    from vllm_codemod.kernels import decode_launch

    decode_launch._plans.clear()
    call()
    torch.cuda.synchronize()
    (plan,) = decode_launch._plans.values()
    k = plan.partition.constexprs
    return dict(
        config=list(plan.config),
        chunk=item_tokens(plan, lens),
        fused=k["FUSED"],
        compact=k["COMPACT"],
        balanced=bool(plan.budget),
        stream=bool(k.get("STREAM")),
        programs=math.prod(plan.partition.grid),
    )


def resources():
    """Registers, spills and shared memory of every compiled partition/reduce kernel."""
    from vllm_codemod.kernels import decode_launch

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


def time_config(config, a, fa, fb, ref, kv_bytes, bw):
    """Chain time of calls forced to ``config``; checked against ``ref`` (the default
    config's output) first.  Errors (out of shared memory, a lowering failure) are
    reported, not raised."""
    launch_tables.set_config_override(config)
    try:
        a["out"].fill_(float("nan"))
        fa()
        torch.cuda.synchronize()
        err = rel(a["out"], ref)
        if not err < 1e-2:
            print(f"    {tuple(config)} WRONG ({err:.1e} vs the default config)", flush=True)
            return {"err_vs_default": err}
        t = chain_us([fa, fb])
        pct = 100 * kv_bytes / (t * 1e-6) / bw
        print(f"    {tuple(config)!s:<34} chain {t:7.1f} us ({pct:5.1f}%)", flush=True)
        return {"chain_us": t, "chain_pct_copy": pct}
    except Exception as exc:  # noqa: BLE001 - any failure of one config is a result
        msg = f"{type(exc).__name__}: {str(exc)[:160]}"
        print(f"    {tuple(config)} ERROR {msg}", flush=True)
        return {"error": msg}
    finally:
        launch_tables.set_config_override(None)


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


def host_us(fn, calls):
    """(enqueue, wall) us per call of ``calls`` back-to-back calls after 50 warm-up calls:
    time to the last enqueue, and to the GPU's end."""
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    return (t1 - t0) * 1e6 / calls, (t2 - t0) * 1e6 / calls


def host_cost():
    """us per call of back-to-back eager entry-point calls, fast path on and off, at
    HOST_SHAPE (one launch) and at 4096 tokens (two launches), beside the same process's
    floors (host_floors.py): three rounds each, interleaved, medians."""
    from host_floors import floors

    from vllm_codemod.kernels import decode_launch

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


def environment():
    import triton

    return dict(
        device=torch.cuda.get_device_name(),
        torch=torch.__version__,
        triton=triton.__version__,
    )


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

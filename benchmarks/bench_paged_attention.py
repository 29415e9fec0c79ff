"""Benchmark the bundled PagedAttention V2 kernels on a CUDA device (never a unit test).

One run measures: device-to-device copy bandwidth (bytes read + written), the Triton
path, the PyTorch path, and torch SDPA over K/V already gathered through the block
table.  Per shape: median time (triton.testing.do_bench, which flushes L2 before every
rep; K+V of every shape is larger than L2 anyway), effective K+V bytes/s (counted
once) and % of the measured copy bandwidth.

    python benchmarks/bench_paged_attention.py [--sweep] [--variants] [--json out.json]
        [--no-torch] [--chain N]

--chain N (default 20) also times N calls captured in one CUDA graph, alternating two
input sets, per call: the cost inside a decode-step graph, where one graph launch serves
many ops (a one-call graph charges its whole launch latency to the op).

--variants also times, in the same process, a short list of explicit launch configs per
shape (tile, warps, stages, early V, split, prefetch, k3d: triton_impl.LaunchConfig) against
the default choice, CUDA-graph timed like the default.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

import torch

from vllm_codemod.kernels import dispatch, triton_impl
from vllm_codemod.kernels.signature import PARTITION_SIZE

# (num_seqs, q heads, kv heads, head size, tokens)
SHAPES = [
    (1, 32, 8, 128, 100_000),
    (1, 32, 8, 128, 32_768),
    (8, 32, 8, 128, 32_768),
    (64, 32, 8, 128, 4096),
    (1, 16, 2, 256, 100_000),
]
# vLLM 0.8.5 CUDA paged_attention_v2 on an H200, measured elsewhere (us).
VLLM_US = {SHAPES[0]: 367, SHAPES[1]: 149, SHAPES[2]: 861, SHAPES[3]: 860, SHAPES[4]: 443}
BLOCK = 16


def bench(fn, warmup=25, rep=200):
    import triton.testing

    try:
        return triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median")
    except TypeError:  # older Triton
        return triton.testing.do_bench(fn, warmup=warmup, rep=rep, quantiles=[0.5])[0]


def copy_bandwidth(nbytes=4 << 30, reps=30):
    src = torch.empty(nbytes // 2, dtype=torch.float16, device="cuda").uniform_()
    dst = torch.empty_like(src)
    times = []
    for _ in range(5):
        dst.copy_(src)
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        dst.copy_(src)
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    ms = statistics.median(times)
    return 2 * nbytes / (ms * 1e-3), ms


def make(shape, dtype=torch.bfloat16, seed=0):
    seqs, nh, nkv, hs, tokens = shape
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = 16 // torch.tensor([], dtype=dtype).element_size()
    per_seq = math.ceil(tokens / BLOCK)
    nblocks = seqs * per_seq
    kc = torch.randn(nblocks, nkv, hs // x, BLOCK, x, device="cuda", dtype=dtype, generator=g)
    vc = torch.randn(nblocks, nkv, hs, BLOCK, device="cuda", dtype=dtype, generator=g)
    tables = torch.randperm(nblocks, device="cuda", generator=g).to(torch.int32)
    tables = tables.view(seqs, per_seq)
    q = torch.randn(seqs, nh, hs, device="cuda", dtype=dtype, generator=g)
    parts = math.ceil(tokens / PARTITION_SIZE)
    return dict(
        out=torch.empty_like(q),
        exp_sums=torch.empty(seqs, nh, parts, device="cuda"),
        max_logits=torch.empty(seqs, nh, parts, device="cuda"),
        tmp_out=torch.empty(seqs, nh, parts, hs, device="cuda", dtype=dtype),
        query=q,
        key_cache=kc,
        value_cache=vc,
        num_kv_heads=nkv,
        scale=1.0 / math.sqrt(hs),
        block_tables=tables,
        seq_lens=torch.full((seqs,), tokens, dtype=torch.int32, device="cuda"),
        block_size=BLOCK,
        max_seq_len=tokens,
    )


def gathered_kv(a, shape):
    seqs, nh, nkv, hs, tokens = shape
    ids = a["block_tables"].long()
    k = a["key_cache"][ids].permute(0, 2, 1, 4, 3, 5).reshape(seqs, nkv, -1, hs)[:, :, :tokens]
    v = a["value_cache"][ids].permute(0, 2, 1, 4, 3).reshape(seqs, nkv, -1, hs)[:, :, :tokens]
    return k.contiguous(), v.contiguous()


def rel(x, y):
    return float((x.float() - y.float()).norm() / y.float().norm())


def graph_time(fn):
    """Median of CUDA-graph replays of fn (how vLLM runs decode): no launch gaps."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return bench(graph.replay) * 1e3


def chain_time(fns, n):
    """Per-call time (us) of n calls captured back to back in one CUDA graph, cycling
    through fns (each on its own input set, so no call finds the previous call's K/V in
    L2).  vLLM captures a whole decode step in one graph, so this is the op's cost there:
    the graph's launch latency is spread over n calls instead of charged to one."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for fn in fns:
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(n):
            fns[i % len(fns)]()
    return bench(graph.replay, warmup=10, rep=100) * 1e3 / n


def kernel_times(fn, iters=10):
    """Per-kernel device time (us per call) from the PyTorch profiler."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    times = {}
    for evt in prof.key_averages():
        t = getattr(evt, "device_time_total", None) or getattr(evt, "cuda_time_total", 0)
        if t:
            times[evt.key[:40]] = t / iters
    return times


SWEEP = [(t, w, s, e) for t in (16, 32, 64) for w in (1, 2, 4) for s in (1, 2) for e in (0, 1)]

# --variants: launch configs per shape, as (tile, warps, stages, early V, split, prefetch,
# k3d) (triton_impl.LaunchConfig); split 1 = no split; prefetch 0 none, 1 block ids one
# tile ahead, 2 block ids + K/V one tile ahead; k3d: K tiles loaded in memory order.
_V128_MANY = [
    (16, 1, 2, True, 1, 0, False),
    (16, 1, 1, True, 1, 1, True),
    (16, 1, 1, False, 1, 1, True),
    (32, 1, 1, True, 1, 0, True),
    (32, 1, 1, True, 1, 1, True),
    (32, 2, 1, True, 1, 1, True),
    (64, 2, 1, True, 1, 0, True),
]
_V128 = [
    (16, 1, 1, False, 1, 0, False),
    (64, 2, 1, True, 1, 0, False),
    (16, 1, 1, True, 1, 1, True),
    (32, 1, 1, True, 1, 0, True),
    (32, 1, 1, False, 1, 0, True),
    (32, 1, 1, True, 1, 1, True),
    (64, 2, 1, True, 1, 0, True),
    (64, 2, 1, False, 1, 0, True),
    (64, 2, 1, True, 1, 1, True),
    (64, 4, 1, False, 1, 0, True),
    (128, 4, 1, True, 1, 0, True),
    (128, 4, 1, False, 1, 0, True),
]
_V256 = [
    (32, 2, 1, True, 1, 0, False),
    (32, 4, 1, True, 1, 0, True),
    (32, 4, 1, False, 1, 0, True),
    (32, 4, 1, True, 1, 1, True),
    (32, 4, 1, True, 2, 0, True),
    (32, 4, 1, True, 4, 0, True),
    (16, 4, 1, True, 2, 0, True),
    (32, 8, 1, False, 1, 0, True),
    (64, 8, 1, True, 1, 0, True),
    (64, 4, 1, False, 1, 0, True),
]
VARIANTS = {
    SHAPES[0]: _V128,
    SHAPES[1]: _V128,
    SHAPES[2]: _V128_MANY,
    SHAPES[3]: _V128_MANY,
    SHAPES[4]: _V256,
}


def run_configs(configs, tri, a, out_ref):
    """Graph time per forced config; NaN when the output differs from out_ref by > 1e-2."""
    res = {}
    for cfg in configs:
        triton_impl.set_config_override(cfg)
        try:
            tri()
            torch.cuda.synchronize()
            err = rel(a["out"], out_ref)
            t = graph_time(tri)
            res[str(cfg)] = t if err < 1e-2 else float("nan")
        except Exception as exc:  # out of shared memory etc.
            res[str(cfg)] = f"{type(exc).__name__}"
        finally:
            triton_impl.set_config_override(None)
    return res


def best_of(res):
    timed = {k: v for k, v in res.items() if isinstance(v, float) and v == v}
    if not timed:
        return [None, float("nan")]
    best = min(timed, key=timed.get)
    return [best, timed[best]]


def _programs(shape):
    seqs, nh, nkv, hs, tokens = shape
    g_pad = triton_impl.group_rows(nh // nkv)
    n_gc = -(-(nh // nkv) // g_pad)
    d_pad = max(16, 1 << max(0, (hs - 1).bit_length()))
    return seqs * nkv * n_gc * math.ceil(tokens / PARTITION_SIZE), d_pad, g_pad


def measure(shape, bw, opts):
    seqs, nh, nkv, hs, tokens = shape
    a = make(shape)
    kv_bytes = 2 * seqs * tokens * nkv * hs * a["key_cache"].element_size()
    row = dict(shape=list(shape), kv_bytes=kv_bytes, floor_us=kv_bytes / bw * 1e6)

    def tri():
        dispatch.paged_attention_v2_with_path(**a, backend="triton")

    def tor():
        dispatch.paged_attention_v2_with_path(**a, backend="torch")

    tri()
    torch.cuda.synchronize()
    row["triton_us"] = bench(tri) * 1e3
    out_triton = a["out"].clone()
    row["triton_graph_us"] = graph_time(tri)
    row["triton_kernels_us"] = kernel_times(tri)
    b = make(shape, seed=1) if opts.chain else None
    if opts.chain:

        def tri_b():
            dispatch.paged_attention_v2_with_path(**b, backend="triton")

        row["triton_chain_us"] = chain_time([tri, tri_b], opts.chain)
    if opts.hints_off:
        triton_impl._use_hints = False
        try:
            tri()
            row["triton_nohints_us"] = bench(tri) * 1e3
        finally:
            triton_impl._use_hints = True
    programs, d_pad, g_pad = _programs(shape)
    row["default_config"] = list(triton_impl.pick_config(programs, d_pad, a["query"].device, g_pad))
    if opts.sweep:
        row["sweep"] = run_configs(SWEEP, tri, a, out_triton)
        row["sweep_best"] = best_of(row["sweep"])
        print(f"  sweep {shape}: best {row['sweep_best']}", flush=True)
    if opts.variants:
        row["variants"] = run_configs(VARIANTS[shape], tri, a, out_triton)
        row["variants_best"] = best_of(row["variants"])
        print(f"  variants {shape}: {row['variants']}", flush=True)
    if not opts.no_torch:
        tor()
        row["torch_err_vs_triton"] = rel(a["out"], out_triton)
        row["torch_us"] = bench(tor, warmup=5, rep=50) * 1e3
    k, v = gathered_kv(a, shape)
    q4 = a["query"].unsqueeze(2)  # [S, H, 1, D]
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def sd():
        return sdpa(q4, k, v, scale=a["scale"], enable_gqa=True)

    row["sdpa_err_vs_triton"] = rel(out_triton, sd().squeeze(2))
    row["sdpa_us"] = bench(sd) * 1e3
    row["sdpa_graph_us"] = graph_time(sd)
    if opts.chain:
        kb, vb = gathered_kv(b, shape)
        qb = b["query"].unsqueeze(2)

        def sd_b():
            return sdpa(qb, kb, vb, scale=b["scale"], enable_gqa=True)

        row["sdpa_chain_us"] = chain_time([sd, sd_b], opts.chain)
    for name in ("triton", "torch", "sdpa", "triton_graph", "sdpa_graph") + (
        ("triton_chain", "sdpa_chain") if opts.chain else ()
    ):
        if f"{name}_us" in row:
            t = row[f"{name}_us"]
            row[f"{name}_GBps"] = kv_bytes / (t * 1e-6) / 1e9
            row[f"{name}_pct_copy"] = 100 * kv_bytes / (t * 1e-6) / bw
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sweep", action="store_true", help="time Triton configs per shape")
    ap.add_argument("--no-torch", action="store_true", help="skip the PyTorch path")
    ap.add_argument("--hints-off", action="store_true", help="also time without hints")
    ap.add_argument("--variants", action="store_true", help="time VARIANTS configs per shape")
    ap.add_argument(
        "--chain",
        type=int,
        default=20,
        help="also time N calls in one graph, alternating two input sets (0: skip)",
    )
    ap.add_argument("--json", default=None)
    opts = ap.parse_args()

    bw, copy_ms = copy_bandwidth()
    print(f"device {torch.cuda.get_device_name()}  torch {torch.__version__}")
    import triton

    print(f"triton {triton.__version__}")
    print(f"copy bandwidth (read+write): {bw / 1e9:.0f} GB/s ({copy_ms:.3f} ms for 2x4 GiB)")
    rows = []
    for shape in SHAPES:
        rows.append(measure(shape, bw, opts))
        torch.cuda.empty_cache()
        print(json.dumps(rows[-1]), flush=True)

    print()
    print(f"copy bw {bw / 1e9:.0f} GB/s; K+V bytes counted once; times are medians in us")
    print("triton/torch/sdpa: eager calls; graph/sdpaG: CUDA-graph replays; err: sdpa vs triton")
    hdr = (
        f"{'shape (seqs,q,kv,head,tokens)':<26} {'floor':>6} {'triton':>7} {'%copy':>5} "
        f"{'graph':>7} {'%copy':>5} {'vllm':>5} {'torch':>8} {'%copy':>5} {'sdpa':>7} "
        f"{'%copy':>5} {'sdpaG':>7} {'err':>7}"
    )
    print(hdr)
    for r in rows:
        tor_us = r.get("torch_us", float("nan"))
        tor_pct = r.get("torch_pct_copy", float("nan"))
        print(
            f"{str(tuple(r['shape'])):<26} {r['floor_us']:6.1f} {r['triton_us']:7.1f} "
            f"{r['triton_pct_copy']:5.1f} {r['triton_graph_us']:7.1f} "
            f"{r['triton_graph_pct_copy']:5.1f} {VLLM_US[tuple(r['shape'])]:5d} {tor_us:8.1f} "
            f"{tor_pct:5.1f} {r['sdpa_us']:7.1f} {r['sdpa_pct_copy']:5.1f} "
            f"{r['sdpa_graph_us']:7.1f} {r['sdpa_err_vs_triton']:7.1e}"
        )
    if opts.chain:
        print()
        print(f"chain: {opts.chain} calls in one CUDA graph, two input sets alternating (us/call)")
        for r in rows:
            print(
                f"{str(tuple(r['shape'])):<26} triton {r['triton_chain_us']:7.1f} "
                f"({r['triton_chain_pct_copy']:5.1f}%)  sdpa {r['sdpa_chain_us']:7.1f} "
                f"({r['sdpa_chain_pct_copy']:5.1f}%)"
            )
    if opts.variants:
        print()
        print("variants (graph us; config = tile, warps, stages, early V, split, prefetch, k3d):")
        for r in rows:
            kv = r["kv_bytes"]
            print(
                f"{str(tuple(r['shape'])):<26} default {tuple(r['default_config'])} "
                f"{r['triton_graph_us']:.1f} ({r['triton_graph_pct_copy']:.1f}%)"
            )
            for cfg, t in r["variants"].items():
                pct = 100 * kv / (t * 1e-6) / bw if isinstance(t, float) and t == t else 0.0
                shown = f"{t:8.1f} ({pct:5.1f}%)" if isinstance(t, float) else t
                print(f"    {cfg:<26} {shown}")
    if opts.json:
        Path(opts.json).write_text(json.dumps(dict(copy_GBps=bw / 1e9, rows=rows), indent=1))


if __name__ == "__main__":
    main()

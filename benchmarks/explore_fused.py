"""One device call: the fused one-launch kernel's launch configs vs. the two-launch kernels.

Per shape: copy bandwidth of this run, the current two-launch path (dispatch), then each
fused config: checked against the two-launch output, timed per call inside a 20-call CUDA
graph (two input sets alternating) and as a one-call graph; compiled kernel resources.
Host cost: 1000 eager back-to-back calls at a small shape.  Writes JSON to argv[1].
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import time

import torch

from vllm_codemod.kernels import call as call_mod
from vllm_codemod.kernels import dispatch
from vllm_codemod.kernels import triton_impl as tf
from vllm_codemod.kernels.launch_tables import FusedConfig

try:  # the two-launch kernels of 0.1.0, carried beside the tree for the baseline column
    from old_kernels import dispatch as old_dispatch
except ImportError:
    old_dispatch = None

BLOCK = 16
RAGGED = [1, 15, 16, 17, 511, 512, 513, 1000, 4096, 8191, 16384, 20000, 32768, 777, 3, 12345]
SHAPES = {
    "1x100K/32-8/128": ([100_000], 32, 8, 128),
    "1x100K/16-2/256": ([100_000], 16, 2, 256),
    "1x100K/28-4/128": ([100_000], 28, 4, 128),
    "1x32K/32-8/128": ([32_768], 32, 8, 128),
    "ragged16/32-8/128": (RAGGED, 32, 8, 128),
    "8x32K/32-8/128": ([32_768] * 8, 32, 8, 128),
    "64x4K/32-8/128": ([4096] * 64, 32, 8, 128),
}


def bench(fn, warmup=10, rep=100):
    import triton.testing

    return triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median")


def copy_bandwidth(nbytes=4 << 30, reps=30):
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
    return 2 * nbytes / (statistics.median(times) * 1e-3)


def make(lens, nh, nkv, hs, dtype=torch.bfloat16, seed=0):
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
    parts = math.ceil(max(lens) / 512)
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
    )


def reference64(a, lens):
    """float64 attention for every sequence (gathered K/V)."""
    q = a["query"].double()
    nkv = a["num_kv_heads"]
    nh, hs = q.shape[1], q.shape[2]
    out = torch.empty_like(q)
    for s, n in enumerate(lens):
        ids = a["block_tables"][s, : math.ceil(n / BLOCK)].long()
        k = a["key_cache"][ids].permute(1, 0, 3, 2, 4).reshape(nkv, -1, hs)[:, :n].double()
        v = a["value_cache"][ids].permute(1, 0, 3, 2).reshape(nkv, -1, hs)[:, :n].double()
        qs = q[s].view(nkv, nh // nkv, hs)
        att = torch.softmax(qs @ k.transpose(1, 2) * a["scale"], -1)
        out[s] = (att @ v).reshape(nh, hs)
    return out


def rel(x, y):
    return float((x.double() - y.double()).norm() / y.double().norm())


def graph_one(fn):
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return bench(graph.replay) * 1e3


def chain(fns, n=20):
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
    return bench(graph.replay, warmup=5, rep=80) * 1e3 / n


def old_call(a):
    return lambda: old_dispatch.paged_attention_v2(**a)


def new_call(a, cfg):
    c = call_mod.build((), dict(a))
    return lambda: tf.run(c, cfg)


C = FusedConfig
CONFIGS_128 = [
    C(t, w, 1, True, 0, True, pps)
    for (t, w, ppss) in ((64, 4, (2, 3, 4, 6, 8)), (32, 2, (4, 8, 12, 16)), (128, 4, (2, 4)))
    for pps in ppss
]
CONFIGS_256 = [
    C(t, w, 1, True, 0, True, pps)
    for (t, w, ppss) in ((32, 4, (1, 2, 3, 4, 6)), (64, 8, (1, 2, 4)), (16, 2, (4, 8)))
    for pps in ppss
]


def resources(cfg_key_prefix):
    found = {}
    for key, plan in tf._plans.items():
        if plan.compiled is None:
            continue
        k = plan.compiled
        found[str(key[-2])] = dict(
            regs=getattr(k, "n_regs", None),
            spills=getattr(k, "n_spills", None),
            shared=getattr(getattr(k, "metadata", None), "shared", None),
        )
    return found


def correctness_sweep():
    """Odd shapes, dtypes, ALiBi, block sizes, repeated: races show as moving errors."""
    bad = 0
    cases = [
        ([1, 700, 1300], 32, 8, 128, torch.bfloat16, True, 16),
        ([513, 1025, 40], 16, 2, 256, torch.float16, True, 16),
        ([600, 1800], 8, 2, 64, torch.float32, False, 16),
        ([1100, 3], 2, 1, 80, torch.bfloat16, False, 8),
        ([70000], 64, 1, 128, torch.bfloat16, False, 16),
        ([5, 1, 3000, 17] * 8, 28, 4, 128, torch.bfloat16, False, 32),
        ([100_000], 32, 8, 128, torch.bfloat16, False, 16),
    ]
    global BLOCK
    for lens, nh, nkv, hs, dt, alibi, bs in cases:
        BLOCK = bs
        for seed in range(2):
            a = make(lens, nh, nkv, hs, dtype=dt, seed=seed)
            if alibi:
                a["alibi_slopes"] = torch.rand(nh, device="cuda") * 0.1
            ref = reference64(a, lens) if not alibi else None
            cfgs = (
                (C(32, 4, 1, True, 0, True, 2),) if hs > 128 else (C(64, 4, 1, True, 0, True, 4),)
            )
            for cfg in cfgs:
                a["out"].fill_(float("nan"))
                tf.run(call_mod.build((), dict(a)), cfg)
                torch.cuda.synchronize()
                if ref is None:  # ALiBi: compare with the two-launch path (f64-tested)
                    o = a["out"].clone()
                    dispatch.paged_attention_v2_with_path(**a, backend="torch")
                    err = rel(o, a["out"])
                else:
                    err = rel(a["out"], ref)
                tol = 1e-4 if dt == torch.float32 else 2e-2
                ok = err < tol
                bad += not ok
                if not ok or seed == 0:
                    print(
                        f"  sweep {len(lens)}x{max(lens)} {nh}/{nkv}/{hs} {dt} alibi={alibi} "
                        f"bs={bs} {tuple(cfg)}: err {err:.2e} {'ok' if ok else 'FAIL'}",
                        flush=True,
                    )
    BLOCK = 16
    return bad


def main():
    out_path = sys.argv[1] if len(sys.argv) > 1 else "explore.json"
    only = sys.argv[2].split(",") if len(sys.argv) > 2 else None
    bad = correctness_sweep()
    print(f"correctness sweep: {bad} failures", flush=True)
    bw = copy_bandwidth()
    print(f"copy bandwidth {bw / 1e9:.0f} GB/s", flush=True)
    results = {"copy_GBps": bw / 1e9, "shapes": {}, "sweep_failures": bad}
    for name, (lens, nh, nkv, hs) in SHAPES.items():
        if only and name not in only:
            continue
        a, b = make(lens, nh, nkv, hs, seed=0), make(lens, nh, nkv, hs, seed=1)
        kv_bytes = 2 * sum(lens) * nkv * hs * 2
        ref = reference64(a, lens)
        row = {}
        baseline = ("1x100K/32-8", "1x100K/16", "ragged")
        if old_dispatch is not None and name.startswith(baseline):
            old_a, old_b = old_call(a), old_call(b)
            old_a()
            torch.cuda.synchronize()
            old_err = rel(a["out"], ref)
            row["old"] = {"err": old_err, "chain": chain([old_a, old_b]), "one": graph_one(old_a)}
            print(
                f"{name}: old err {old_err:.1e} chain {row['old']['chain']:.1f} "
                f"one {row['old']['one']:.1f} us",
                flush=True,
            )
        cfgs = CONFIGS_256 if hs > 128 else CONFIGS_128
        for cfg in cfgs:
            fa, fb = new_call(a, cfg), new_call(b, cfg)
            try:
                a["out"].fill_(float("nan"))
                fa()
                torch.cuda.synchronize()
                err = rel(a["out"], ref)
                if not err < 2e-2:
                    row[str(tuple(cfg))] = {"err": err}
                    print(f"  {tuple(cfg)} WRONG err {err}", flush=True)
                    continue
                t = chain([fa, fb])
                row[str(tuple(cfg))] = {"err": err, "chain": t}
            except Exception as exc:
                row[str(tuple(cfg))] = {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
                print(f"  {tuple(cfg)} ERROR {type(exc).__name__}: {str(exc)[:200]}", flush=True)
        timed = {k: v["chain"] for k, v in row.items() if k != "old" and "chain" in v}
        best = sorted(timed, key=timed.get)[:2]
        for k in sorted(timed):
            print(f"  {k}: chain {timed[k]:.1f} us", flush=True)
        for k in best:
            cfg = C(*eval(k))  # noqa: S307 - our own repr of a tuple of ints/bools
            row[k]["one"] = graph_one(new_call(a, cfg))
        row["kv_bytes"] = kv_bytes
        results["shapes"][name] = row
        for k in best:
            print(
                f"  best {k}: chain {row[k]['chain']:.1f} us "
                f"({kv_bytes / (row[k]['chain'] * 1e-6) / bw * 100:.1f}% of copy), "
                f"one {row[k]['one']:.1f} us, err {row[k]['err']:.1e}",
                flush=True,
            )
        del a, b
        torch.cuda.empty_cache()
        with open(out_path, "w") as fh:
            json.dump(results, fh, indent=1, default=str)
    results["resources"] = resources("")
    # Host cost: 1000 eager calls, small shape, through each entry point.
    a = make([1024], 32, 8, 128)
    pos = [a[k] for k in ("out", "exp_sums", "max_logits", "tmp_out", "query", "key_cache")]
    pos += [a[k] for k in ("value_cache", "num_kv_heads", "scale", "block_tables", "seq_lens")]
    pos += [a["block_size"], a["max_seq_len"], None, "auto", 1.0, 1.0]
    host = {}
    runs = [("fused_entry", lambda: dispatch.paged_attention_v2(*pos))]
    if old_dispatch is not None:
        runs.append(("old_entry", lambda: old_dispatch.paged_attention_v2(*pos)))
    runs.append(("fused_run_only", new_call(a, tf.pick_config(128, 16))))
    for label, fn in runs + [("fused_entry_plain", runs[0][1])]:
        tf._fast["enabled"] = label != "fused_entry_plain"
        for _ in range(50):
            fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(1000):
            fn()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        host[label] = {"enqueue_us": (t1 - t0) * 1e3, "wall_us": (t2 - t0) * 1e3}
        print(f"host {label}: {(t1 - t0) * 1e3:.1f} us/call enqueue, {(t2 - t0) * 1e3:.1f} wall")
    tf._fast["enabled"] = True
    results["host"] = host
    with open(out_path, "w") as fh:
        json.dump(results, fh, indent=1, default=str)


if __name__ == "__main__":
    main()

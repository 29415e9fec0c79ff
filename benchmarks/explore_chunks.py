"""Session-5 exploration (issue #13): chunk size, compact grid, fused merge, host path.

Times forced variants per shape in CUDA graphs (per call in a 20-call graph, as
bench_paged_attention.py), every variant checked against the float64 reference first.
Run from the repo root:  python benchmarks/explore_chunks.py --json out.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
from bench_common import (
    SHAPES,
    chain_us,
    copy_bandwidth,
    entry,
    item_tokens,
    make,
    one_call_graph_us,
    reference64,
    rel,
)

from vllm_codemod.kernels import decode_launch as ti
from vllm_codemod.kernels import launch_tables
from vllm_codemod.kernels.launch_tables import LaunchConfig as LC

H128 = [LC(64, 2, 1, True, 0, True), LC(32, 1, 1, True, 1, True), LC(32, 2, 1, True, 1, True)]
H256 = [LC(32, 4, 1, True, 1, True), LC(32, 2, 1, True, 1, True), LC(16, 1, 1, True, 1, True)]


def more_batches():
    """Batches beside the benchmark's (fixed seed): ragged 64 and 256, and two of short
    sequences."""
    import random

    rnd = random.Random(64)
    return {
        "ragged64/32-8/128": ([rnd.randint(1, 8192) for _ in range(64)], 32, 8, 128),
        "ragged256/32-8/128": ([rnd.randint(1, 4096) for _ in range(256)], 32, 8, 128),
        "short256/32-8/128": ([rnd.randint(1, 200) for _ in range(256)], 32, 8, 128),
        "short64/32-8/128": ([rnd.randint(100, 600) for _ in range(64)], 32, 8, 128),
    }


def run_variant(name, a, fa, fb, ref, kv_bytes, bw, config=None, knobs=None, one=False):
    knobs = knobs or {}
    unknown = [k for k in knobs if not hasattr(ti, k) and not hasattr(launch_tables, k)]
    if unknown:
        raise SystemExit(f"unknown knob(s) {unknown}")
    saved = {k: getattr(ti, k) if hasattr(ti, k) else getattr(launch_tables, k) for k in knobs}
    for k, v in knobs.items():
        setattr(ti if hasattr(ti, k) else launch_tables, k, v)
    ti._plans.clear()
    launch_tables.set_config_override(config)
    label = f"{tuple(config) if config else 'table'} {knobs or ''}"
    row = {"config": list(config) if config else None, "knobs": knobs}
    try:
        a["out"].fill_(float("nan"))
        fa()
        torch.cuda.synchronize()
        err = rel(a["out"], ref)
        row["err_f64"] = err
        plan = next(iter(ti._plans.values()))
        k = plan.partition.constexprs
        row["chunk"], row["fused"], row["compact"] = k["PART"], k["FUSED"], k["COMPACT"]
        row["budget"] = plan.budget
        row["chunk"] = item_tokens(plan, a["seq_lens"].tolist())
        row["grid"] = list(plan.partition.grid)
        comp = plan.partition.compiled
        row["regs"] = getattr(comp, "n_regs", None)
        row["spills"] = getattr(comp, "n_spills", None)
        if not err < 2e-2:
            print(f"  {name:<18} {label:<60} WRONG err {err:.1e}", flush=True)
            return row
        t = chain_us([fa, fb])
        row["chain_us"] = t
        row["chain_pct"] = 100 * kv_bytes / (t * 1e-6) / bw
        extra = ""
        if one:
            row["one_us"] = one_call_graph_us(fa)
            extra = f" one {row['one_us']:7.1f}"
        print(
            f"  {name:<18} {label:<60} chunk {row['chunk']:>3} fused {int(row['fused'])} "
            f"compact {int(row['compact'])} budget {row['budget']} regs {row['regs']} "
            f"chain {t:7.1f} us "
            f"({row['chain_pct']:5.1f}%){extra} err {err:.1e}",
            flush=True,
        )
    except Exception as exc:  # noqa: BLE001
        row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
        print(f"  {name:<18} {label} ERROR {row['error']}", flush=True)
    finally:
        launch_tables.set_config_override(None)
        for k, v in saved.items():
            setattr(ti if hasattr(ti, k) else launch_tables, k, v)
        ti._plans.clear()
    return row


def shape_rows(name, lens, nh, nkv, hs, bw, variants, one=False):
    a, b = make(lens, nh, nkv, hs, seed=0), make(lens, nh, nkv, hs, seed=1)
    kv_bytes = 2 * sum(lens) * nkv * hs * a["key_cache"].element_size()
    ref = reference64(a)
    fa, fb = entry(a), entry(b)
    rows = []
    for config, knobs in variants:
        r = run_variant(name, a, fa, fb, ref, kv_bytes, bw, config, knobs, one)
        r["shape"] = name
        rows.append(r)
    del a, b
    torch.cuda.empty_cache()
    return rows


def host(lens, label, knobs):
    saved = {k: getattr(ti, k) for k in knobs}
    for k, v in knobs.items():
        setattr(ti, k, v)
    ti._plans.clear()
    try:
        a = make(lens, 32, 8, 128)
        fn = entry(a)
        for _ in range(50):
            fn()
        torch.cuda.synchronize()
        best = []
        for _ in range(3):
            t0 = time.perf_counter()
            for _ in range(1000):
                fn()
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            best.append((t1 - t0) * 1e3)
        us = sorted(best)[1]
        print(f"  host {label:<40} {us:6.1f} us/call (median of 3 x 1000)", flush=True)
        return {"label": label, "knobs": knobs, "us": us, "runs": best}
    finally:
        for k, v in saved.items():
            setattr(ti, k, v)
        ti._plans.clear()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", required=True)
    ap.add_argument("--parts", default="single,ragged,batch,fused,host")
    opts = ap.parse_args()
    parts = opts.parts.split(",")
    out = {"device": torch.cuda.get_device_name()}
    bw = copy_bandwidth()
    out["copy_GBps"] = bw / 1e9
    print(f"copy {bw / 1e9:.0f} GB/s", flush=True)
    rows = out["rows"] = []

    def save():
        Path(opts.json).write_text(json.dumps(out, indent=1, default=str))

    if "single" in parts:
        for name in ("1x100K/32-8/128", "1x100K/28-4/128", "1x32K/32-8/128", "1x100K/16-2/256"):
            lens, nh, nkv, hs = SHAPES[name]
            configs = H256 if hs == 256 else H128
            variants = [(None, {})]
            for chunk in (512, 256, 128):
                variants += [(c._replace(chunk=chunk), {}) for c in configs]
            if name in ("1x100K/28-4/128", "1x100K/16-2/256", "1x32K/32-8/128"):
                variants.append((configs[1]._replace(chunk=64), {}))
            rows += shape_rows(name, lens, nh, nkv, hs, bw, variants)
            save()
    if "more" in parts:  # a second round around the v25 winners
        one_warp = [
            LC(16, 1, 1, True, 1, True, 512),
            LC(16, 1, 1, True, 1, True, 256),
            LC(16, 1, 1, True, 1, True, 128),
            LC(32, 1, 1, True, 2, True, 256),
            LC(32, 1, 2, True, 1, True, 256),
        ]
        more = {
            "1x100K/32-8/128": one_warp,
            "1x100K/28-4/128": one_warp,
            "1x32K/32-8/128": one_warp,
            "1x100K/16-2/256": [
                LC(16, 4, 1, True, 1, True, 512),
                LC(16, 2, 1, True, 1, True, 512),
                LC(16, 4, 1, True, 1, True, 256),
                LC(16, 2, 1, True, 1, True, 256),
            ],
            "ragged16/32-8/128": [
                LC(32, 1, 1, True, 1, True, 256),
                LC(32, 1, 1, True, 1, True, 128),
                LC(16, 1, 1, True, 1, True, 256),
            ],
            "8x32K/32-8/128": [LC(32, 1, 1, True, 1, True, 256)],
            "64x4K/32-8/128": [LC(32, 1, 1, True, 1, True, 256)],
        }
        for name, configs in more.items():
            lens, nh, nkv, hs = SHAPES[name]
            variants = [(None, {})] + [(c, {}) for c in configs]
            rows += shape_rows(name, lens, nh, nkv, hs, bw, variants)
            save()
    if "ragged" in parts:
        lens, nh, nkv, hs = SHAPES["ragged16/32-8/128"]
        variants = []
        for cfg in (None, H128[0], H128[2]):
            # (run v25 also timed a persistent compact grid, 8 and 16 programs per SM: the
            # knob went with it, see docs/kernel-notes.md)
            variants += [(cfg, {"COMPACT_MAX_SEQS": 0}), (cfg, {})]
        variants.append((H128[0]._replace(chunk=256), {}))
        rows += shape_rows("ragged16/32-8/128", lens, nh, nkv, hs, bw, variants)
        save()
    if "batch" in parts:
        for name in ("8x32K/32-8/128", "64x4K/32-8/128"):
            lens, nh, nkv, hs = SHAPES[name]
            variants = [(None, {"COMPACT_MAX_SEQS": 0}), (None, {})]
            rows += shape_rows(name, lens, nh, nkv, hs, bw, variants)
            save()
    if "balanced" in parts:  # session 6: item length from the lengths' total, on the device
        off = {"BALANCED_WAVES": 0}
        for name in (
            "1x100K/32-8/128",
            "1x100K/28-4/128",
            "1x32K/32-8/128",
            "ragged16/32-8/128",
            "8x32K/32-8/128",
            "64x4K/32-8/128",
        ):
            lens, nh, nkv, hs = SHAPES[name]
            variants = [(None, off)]
            variants += [(None, {"BALANCED_WAVES": w}) for w in (1, 2, 3)]
            variants += [(None, {"BALANCED_FORCE_SLOTS": n}) for n in (6, 7)]
            variants.append((H128[0], {"BALANCED_FORCE_SLOTS": 4}))
            rows += shape_rows(name, lens, nh, nkv, hs, bw, variants)
            save()
        lens, nh, nkv, hs = SHAPES["1x100K/16-2/256"]
        variants = [(None, off)]
        variants += [(None, {"BALANCED_FORCE_SLOTS": 3, "BALANCED_WAVES": w}) for w in (1, 2)]
        variants += [(H256[1], {"BALANCED_FORCE_SLOTS": n}) for n in (4, 6)]
        rows += shape_rows("1x100K/16-2/256", lens, nh, nkv, hs, bw, variants)
        save()
    if "balanced2" in parts:  # the rule as shipped against balancing off, and two more
        off = {"BALANCED_WAVES": 0}
        for name, (lens, nh, nkv, hs) in SHAPES.items():
            variants = [(None, {}), (None, off)]
            if name.startswith("ragged"):
                variants.append((None, {"BALANCED_WAVES": 1, "BALANCED_FORCE_SLOTS": 7}))
            if hs == 256:
                variants += [(H256[1], {"BALANCED_FORCE_SLOTS": 4}), (H256[1], {})]
            rows += shape_rows(name, lens, nh, nkv, hs, bw, variants)
            save()
    if "balanced3" in parts:  # batches above BALANCED_MAX_SEQS (run v33)
        import random

        rnd = random.Random(64)
        extra = {
            "ragged64/32-8/128": ([rnd.randint(1, 8192) for _ in range(64)], 32, 8, 128),
            "ragged256/32-8/128": ([rnd.randint(1, 4096) for _ in range(256)], 32, 8, 128),
        }
        names = ("ragged16/32-8/128", "8x32K/32-8/128", "64x4K/32-8/128")
        for name, (lens, nh, nkv, hs) in [(n, SHAPES[n]) for n in names] + list(extra.items()):
            variants = [(None, {}), (None, {"BALANCED_WAVES": 0})]
            for w in (2, 4):
                variants.append((None, {"BALANCED_MAX_SEQS": 256, "BALANCED_WAVES": (1, w)}))
            rows += shape_rows(name, lens, nh, nkv, hs, bw, variants)
            save()
    if "stream" in parts:  # session 7: batches as one stream of equal token ranges
        extra = more_batches()
        names = ("ragged16/32-8/128", "8x32K/32-8/128", "64x4K/32-8/128")
        for name, (lens, nh, nkv, hs) in [(n, SHAPES[n]) for n in names] + list(extra.items()):
            variants = [(None, {}), (None, {"BALANCED_STREAM": False})]
            if "stream-waves" in parts:
                variants += [(None, {"STREAM_WAVES": w}) for w in (2, 3)]
            rows += shape_rows(name, lens, nh, nkv, hs, bw, variants)
            save()
    if "seg8" in parts:  # session 8: the batch reduce's rows, residency, the two-warp config
        # (run v41 also timed STREAM_SEG_TOKENS 32/96/256, and v42 the ragged lengths in
        # four orders: the knob is on branch seg8, see docs/kernel-notes.md)
        extra = more_batches()
        names = ("ragged16/32-8/128", "8x32K/32-8/128", "64x4K/32-8/128")
        for name, (lens, nh, nkv, hs) in [(n, SHAPES[n]) for n in names] + list(extra.items()):
            variants = [(None, {})]
            variants.append((None, {"REDUCE_BATCH_ROWS": 64}))
            variants.append((None, {"BALANCED_FORCE_SLOTS": 7}))
            variants.append((H128[0], {"BALANCED_FORCE_SLOTS": 4}))
            rows += shape_rows(name, lens, nh, nkv, hs, bw, variants)
            save()
    if "slots8" in parts:  # session 8: the balanced wave planned for other residencies
        # What `tune` now times on the target device (LaunchConfig.slots): on the H200 the
        # tables' figures (8 one-warp programs per SM, 4 for head 256's two-warp config)
        # should win, or the tables are wrong.
        one = LC(32, 1, 1, True, 1, True)
        two = LC(32, 2, 1, True, 1, True)
        for name in (
            "1x100K/32-8/128",
            "1x100K/28-4/128",
            "1x32K/32-8/128",
            "1x100K/16-2/256",
            "ragged16/32-8/128",
            "8x32K/32-8/128",
        ):
            lens, nh, nkv, hs = SHAPES[name]
            base, counts = (two, (2, 3, 6)) if hs == 256 else (one, (4, 6, 12))
            variants = [(None, {})] + [(base._replace(slots=n), {}) for n in counts]
            rows += shape_rows(name, lens, nh, nkv, hs, bw, variants)
            save()
    if "fuse8" in parts:  # session 8: eager one-launch calls up to 8 or 16 partitions
        # Rounds interleaved across the limits (run v42 timed them one after another, and
        # the first limit of every shape came out 15-30 us slower), medians of 3.
        from bench_common import host_us

        h = out.setdefault("fuse8", [])
        limits = (4, 8, 16)

        def gpu_us(fn, calls=200):
            # The GPU's own time per eager call: a sleep kernel first, so the host has
            # queued every call before the GPU reaches them (200 calls at <= 60 us of
            # host time each: 12 ms, inside the sleep's ~16 ms).
            torch.cuda.synchronize()
            torch.cuda._sleep(30_000_000)
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(calls):
                fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) * 1e3 / calls

        def with_limit(most, fn):
            saved = ti.FUSE_MAX_PARTITIONS
            ti.FUSE_MAX_PARTITIONS = most
            ti._plans.clear()
            try:
                return fn()
            finally:
                ti.FUSE_MAX_PARTITIONS = saved
                ti._plans.clear()

        for lens in ([2048], [4096], [6000], [8192], [3000, 5000]):
            a = make(lens, 32, 8, 128)
            fn = entry(a)
            ref = reference64(a)
            rows_of = {}
            for most in limits:

                def check(a=a, fn=fn, ref=ref):
                    a["out"].fill_(float("nan"))
                    fn()
                    torch.cuda.synchronize()
                    return rel(a["out"], ref), next(iter(ti._plans.values())).reduce is None

                err, fused = with_limit(most, check)
                rows_of[most] = dict(lens=lens, most=most, fused=fused, err=err, runs=[], gpu=[])
            for _ in range(3):
                for most in limits:
                    row = rows_of[most]
                    row["runs"].append(with_limit(most, lambda fn=fn: host_us(fn, 1000)))
                    row["gpu"].append(with_limit(most, lambda fn=fn: gpu_us(fn)))
            for most, row in rows_of.items():
                row["enq"] = statistics.median(e for e, _ in row["runs"])
                row["wall"] = statistics.median(w for _, w in row["runs"])
                row["gpu_us"] = statistics.median(row["gpu"])
                h.append(row)
                print(
                    f"  eager {str(lens):<14} FUSE_MAX_PARTITIONS {most:>2} "
                    f"fused {int(row['fused'])} enqueue {row['enq']:6.1f} "
                    f"wall {row['wall']:6.1f} GPU {row['gpu_us']:6.1f} us/call "
                    f"err {row['err']:.1e}",
                    flush=True,
                )
            save()
    if "reduce7" in parts:  # session 7: the reduce's tile for one sequence; head-256 configs

        def tile_with(d_blk):
            # One sequence: the same values per load in d_blk-column slices (more or
            # fewer programs); the loop takes over when the partials no longer fit.
            def pick(num_seqs, n_chunks, d_pad, base=ti.reduce_tile):
                rows, blk, single = base(num_seqs, n_chunks, d_pad)
                if num_seqs > 1:
                    return rows, blk, single
                rows = rows * blk // d_blk
                return rows, d_blk, single and n_chunks <= rows

            return pick

        for name in ("1x32K/32-8/128", "1x100K/28-4/128", "1x100K/32-8/128", "1x100K/16-2/256"):
            lens, nh, nkv, hs = SHAPES[name]
            variants = [(None, {}), (None, {"reduce_tile": tile_with(16)})]
            variants.append((None, {"reduce_tile": tile_with(64)}))
            if hs == 256:
                for cfg, slots in (
                    (LC(32, 2, 1, True, 0, True), 4),
                    (LC(32, 2, 1, False, 1, True), 4),
                    (LC(16, 2, 1, True, 1, True), 4),
                    (LC(16, 2, 1, True, 1, True), 6),
                    (LC(64, 4, 1, True, 0, True), 2),
                ):
                    variants.append((cfg, {"BALANCED_FORCE_SLOTS": slots}))
            rows += shape_rows(name, lens, nh, nkv, hs, bw, variants)
            save()
    if "fused" in parts:
        for lens in ([1024], [2048], [4096], [8192], [1000, 3, 2048, 513]):
            name = f"{len(lens)}x{max(lens)}"
            variants = [
                (None, {"FUSE_MAX_PARTITIONS": 0}),
                (None, {}),
                (None, {"FUSE_MAX_CHUNKS": 64}),
            ]
            rows += shape_rows(name, lens, 32, 8, 128, bw, variants, one=True)
            save()
    if "table" in parts:  # the bundled H200 tuning table against the new defaults
        from vllm_codemod.kernels import tuned

        for lens in ([2048], [4096], [8192], [16384]):
            for on in (True, False):
                saved = dict(tuned._state)
                if not on:
                    tuned._state["present"] = False
                try:
                    name = f"1x{lens[0]} table {'on' if on else 'off'}"
                    rows += shape_rows(name, lens, 32, 8, 128, bw, [(None, {})], one=True)
                finally:
                    tuned._state.clear()
                    tuned._state.update(saved)
        save()
    if "profile" in parts:  # where an eager entry-point call spends its host time
        import cProfile
        import io
        import pstats

        a = make([1024], 32, 8, 128)
        fn = entry(a)
        for _ in range(100):
            fn()
        torch.cuda.synchronize()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(2000):
            fn()
        prof.disable()
        torch.cuda.synchronize()
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(25)
        out["profile"] = buf.getvalue()
        print(buf.getvalue(), flush=True)
        save()
    if "host" in parts:
        h = out["host"] = []
        two = {"FUSE_MAX_PARTITIONS": 0, "FUSE_MAX_CHUNKS": 0}
        for lens in ([1024], [2048]):
            for label, knobs in (
                ("two launches, plain", dict(two, _fast={"enabled": False})),
                ("two launches, compiled", dict(two)),
                ("fused, plain", {"_fast": {"enabled": False}}),
                ("fused, compiled", {}),
            ):
                h.append(host(lens, f"{lens} {label}", knobs))
        save()
    save()


if __name__ == "__main__":
    main()

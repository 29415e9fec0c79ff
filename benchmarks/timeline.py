"""Where a decode call's time goes inside a 20-call CUDA graph (issue #13's fixed cost).

Three measurements per shape of ``bench_paged_attention.SHAPES``, in one process, after
the copy bandwidth:

* ``profile``: the default plan's 20-call graph replayed under ``torch.profiler``; from the
  kernels' own start/end stamps, the median duration of each kernel and of the gaps
  between consecutive kernels, and the span per call;
* ``parts``: the same graph (CUDA events, median of replays) with the reduce launch left
  out, and with the partition launch left out: what each launch adds per call, boundary
  included.  Outputs are not checked there (they are incomplete on purpose);
* ``floors``: a plain streaming-read Triton kernel over the shape's K+V bytes (one
  contiguous buffer, no block table, two buffers alternating), at a few grid sizes and
  warps, in the same 20-call graph: what one kernel launch per call costs when it does
  nothing but read.  Plus a pair of empty kernels per call: the boundary alone.

    python benchmarks/timeline.py [--parts profile,parts,floors] [--shapes A,B]
        [--knobs '{"REDUCE_WARPS": 2}'] --json F
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch
import triton
import triton.language as tl
from bench_common import CHAIN, SHAPES, chain_graph, chain_us, copy_bandwidth, entry, make

from vllm_codemod.kernels import decode_launch as ti
from vllm_codemod.kernels import launch_tables


@triton.jit
def _stream_read(x_ptr, out_ptr, per_prog, BLOCK: tl.constexpr):
    # Each program reads its own contiguous run of per_prog elements, BLOCK per step.
    base = x_ptr + tl.program_id(0).to(tl.int64) * per_prog
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for i in range(0, per_prog, BLOCK):
        acc += tl.load(base + i + tl.arange(0, BLOCK)).to(tl.float32)
    tl.store(out_ptr + tl.program_id(0), tl.sum(acc, 0))


@triton.jit
def _empty(out_ptr):
    tl.store(out_ptr + tl.program_id(0), 0.0)


def kernel_timeline(fns, replays=5):
    """Median kernel durations by name and median gaps between consecutive kernels
    (named by the kernel that follows), from the profiler's device-side stamps."""
    from torch.profiler import ProfilerActivity, profile

    graph = chain_graph(fns)
    graph.replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            graph.replay()
        torch.cuda.synchronize()
    kernels = sorted(
        (e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA),
        key=lambda e: e.time_range.start,
    )
    kernels = [e for e in kernels if "memcpy" not in e.name.lower()]
    if not kernels:
        return {"error": "the profiler saw no kernels of the graph"}
    durations, gaps = {}, {}
    for prev, e in zip([None] + kernels[:-1], kernels):
        name = e.name.split("(")[0]
        durations.setdefault(name, []).append(e.time_range.end - e.time_range.start)
        if prev is not None:
            gap = e.time_range.start - prev.time_range.end
            if gap < 50:  # not the pause between two replays
                gaps.setdefault(name, []).append(gap)
    span = (kernels[-1].time_range.end - kernels[0].time_range.start) / (replays * CHAIN)
    return {
        "kernels": {n: statistics.median(v) for n, v in durations.items()},
        "counts": {n: len(v) for n, v in durations.items()},
        "gap_before": {n: statistics.median(v) for n, v in gaps.items()},
        "span_per_call_us": span,
    }


class _NoLaunch:
    def launch(self, args) -> None:
        pass


def summary(prof) -> str:
    """One line of kernel_timeline's result: each kernel's median duration, and the
    median gap before it."""
    if "error" in prof:
        return f"profile: {prof['error']}"
    times = ", ".join(f"{k} {v:.2f} us" for k, v in prof["kernels"].items())
    gaps = ", ".join(f"{k} {v:.2f} us" for k, v in prof["gap_before"].items())
    return f"kernels: {times}; gaps before: {gaps}"


def without(fns, kind):
    """The same calls with one of the plan's launches left out (timing only)."""
    for fn in fns:
        fn()
    torch.cuda.synchronize()
    saved = [(plan, getattr(plan, kind)) for plan in ti._plans.values()]
    for plan, _ in saved:
        setattr(plan, kind, None if kind == "reduce" else _NoLaunch())
    try:
        return chain_us(fns)
    finally:
        for plan, kernel in saved:
            setattr(plan, kind, kernel)


def stream_floor(nbytes, bw):
    """Best per-call time of the streaming read over nbytes (bf16), 20 calls per graph."""
    n = nbytes // 2
    bufs = [torch.randn(n, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for per_sm in (2, 4, 8, 16):
        for warps in (1, 4):
            block = 512 * warps
            progs = sms * per_sm
            per_prog = -(-n // progs)
            per_prog = -(-per_prog // block) * block
            if per_prog * progs > n:
                progs = n // per_prog
            out = torch.empty(progs, device="cuda", dtype=torch.float32)

            def call(buf, progs=progs, per_prog=per_prog, out=out, block=block, warps=warps):
                kernel = _stream_read[(progs,)]
                return lambda: kernel(buf, out, per_prog, BLOCK=block, num_warps=warps)

            us = chain_us([call(bufs[0]), call(bufs[1])])
            pct = 100 * progs * per_prog * 2 / (us * 1e-6) / bw
            rows.append(dict(per_sm=per_sm, warps=warps, programs=progs, us=us, pct=pct))
    del bufs
    torch.cuda.empty_cache()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", required=True)
    ap.add_argument("--parts", default="profile,parts,floors")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--knobs", default="{}", help="JSON: decode_launch/launch_tables settings")
    opts = ap.parse_args()
    for knob, value in json.loads(opts.knobs).items():
        module = ti if hasattr(ti, knob) else launch_tables
        if not hasattr(module, knob):
            ap.error(f"unknown knob {knob}")
        setattr(module, knob, tuple(value) if isinstance(value, list) else value)
    parts = opts.parts.split(",")
    out = {"device": torch.cuda.get_device_name(), "triton": triton.__version__}
    out["knobs"] = json.loads(opts.knobs)
    bw = copy_bandwidth()
    out["copy_GBps"] = bw / 1e9
    print(f"copy {bw / 1e9:.0f} GB/s", flush=True)
    rows = out["shapes"] = {}

    def save():
        Path(opts.json).write_text(json.dumps(out, indent=1, default=str))

    if "floors" in parts:
        flag = torch.zeros(1024, device="cuda")
        pair = [lambda: (_empty[(132,)](flag), _empty[(132,)](flag))]
        out["empty_pair_us"] = chain_us(pair)
        print(f"two empty kernels per call: {out['empty_pair_us']:.2f} us", flush=True)
    for name in opts.shapes.split(","):
        lens, nh, nkv, hs = SHAPES[name]
        kv_bytes = 2 * sum(lens) * nkv * hs * 2
        row = rows[name] = {"kv_bytes": kv_bytes}
        a, b = make(lens, nh, nkv, hs, seed=0), make(lens, nh, nkv, hs, seed=1)
        fns = [entry(a), entry(b)]
        ti._plans.clear()
        row["chain_us"] = chain_us(fns)
        print(f"{name}: chain {row['chain_us']:.1f} us", flush=True)
        if "profile" in parts:
            row["profile"] = kernel_timeline(fns)
            print(f"  {summary(row['profile'])}", flush=True)
        if "parts" in parts:
            row["no_reduce_us"] = without(fns, "reduce")
            row["no_partition_us"] = without(fns, "partition")
            print(
                f"  without reduce {row['no_reduce_us']:.1f} us, without partition "
                f"{row['no_partition_us']:.1f} us",
                flush=True,
            )
        del a, b, fns
        ti._plans.clear()
        torch.cuda.empty_cache()
        if "floors" in parts:
            row["stream"] = stream_floor(kv_bytes, bw)
            best = min(row["stream"], key=lambda r: r["us"])
            print(f"  stream read floor {best}", flush=True)
        save()
    save()


if __name__ == "__main__":
    main()

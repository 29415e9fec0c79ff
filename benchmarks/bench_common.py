"""What the decode benchmarks share: the shapes, inputs in vLLM's layout on the device,
the float64 check, and the timers (CUDA-graph chains, one-call graphs, host cost).

Every benchmark here imports this module and nothing imports a benchmark, so there is
no import circle; run them as ``python benchmarks/NAME.py`` (this directory is then
first on the import path) with the project installed (``pip install -e .``).
"""

from __future__ import annotations

import math
import statistics
import time

import torch

from vllm_codemod.kernels import decode_launch, dispatch, launch_tables
from vllm_codemod.kernels.paged_inputs import decode_case
from vllm_codemod.kernels.reference import reference_for_args

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
HOST_CALLS = 1000


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
    gen = torch.Generator().manual_seed(seed)
    return decode_case(lens, nh, nkv, hs, BLOCK, dtype, "cuda", gen, kv_on_device=True, fill=None)


def positional(a):
    """vLLM >= 0.5's positional arguments (17: through k_scale, v_scale)."""
    names = ("out", "exp_sums", "max_logits", "tmp_out", "query", "key_cache", "value_cache")
    names += ("num_kv_heads", "scale", "block_tables", "seq_lens", "block_size", "max_seq_len")
    return tuple(a[n] for n in names) + (None, "auto", 1.0, 1.0)


def reference64(a):
    """float64 attention for every sequence, K/V gathered through the table on the device."""
    return reference_for_args(a, device=a["query"].device)


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


def environment():
    import triton

    return dict(
        device=torch.cuda.get_device_name(),
        torch=torch.__version__,
        triton=triton.__version__,
    )


def main() -> None:
    """The device, its software and its copy bandwidth: the roofline every decode
    benchmark here reports against."""
    print(" ".join(f"{k} {v}" for k, v in environment().items()))
    print(f"copy bandwidth (read+write) {copy_bandwidth() / 1e9:.0f} GB/s")


if __name__ == "__main__":
    main()
